"""Settings composed of its groups: every field of a group is a setting, in the groups' order
(server first, jobs last), which `embedgate serve`'s flags and the settings' schema follow."""

from embedgate.api.settings import Settings
from embedgate.api.settings.access import AccessSettings
from embedgate.api.settings.batching import BatchingSettings
from embedgate.api.settings.images import ImageSettings
from embedgate.api.settings.jobs import JobsSettings
from embedgate.api.settings.measuring import MeasuringSettings
from embedgate.api.settings.repository import RepositorySettings
from embedgate.api.settings.requests import RequestSettings
from embedgate.api.settings.residency import ResidencySettings
from embedgate.api.settings.scale_out import ScaleOutSettings
from embedgate.api.settings.server import ServerSettings
from embedgate.api.settings.triton import TritonSettings

GROUPS = [
    ServerSettings,
    RepositorySettings,
    TritonSettings,
    BatchingSettings,
    RequestSettings,
    ResidencySettings,
    MeasuringSettings,
    AccessSettings,
    ImageSettings,
    ScaleOutSettings,
    JobsSettings,
]


def test_the_settings_are_the_groups_fields_in_the_groups_order():
    assert list(Settings.model_fields) == [name for group in GROUPS for name in group.model_fields]


def test_no_field_is_in_two_groups():
    names = [name for group in GROUPS for name in group.model_fields]
    assert len(names) == len(set(names))
