"""Failures a conversion reports to the gateway, each with its own exit code."""

from __future__ import annotations


class ConversionError(Exception):
    """A failure with a message meant for the user (one line, no traceback)."""

    exit_code = 1


class ModelNotFoundError(ConversionError):
    exit_code = 2


class ParityError(ConversionError):
    exit_code = 3


class TargetExistsError(ConversionError):
    exit_code = 4


class OutOfMemoryError(ConversionError):
    exit_code = 5


class DiskFullError(ConversionError):
    exit_code = 6


class UnsupportedModelError(ConversionError):
    """A model that cannot be served exactly as asked: a kind embedgate does not serve (or
    not through this request), custom code without trust_remote_code, a module or setting
    the exported graph cannot reproduce. Nothing is published."""

    exit_code = 8


class RemoteCodeRefused(UnsupportedModelError):
    """A model that runs code of its own (its modeling files, custom modules), loaded without
    trust_remote_code: what the request did not allow, rather than what cannot be served."""

    exit_code = 9


class RepositoryError(ConversionError):
    """The model repository could not be read or written (an S3 service unreachable,
    access denied): nothing about the model itself."""

    exit_code = 7


class HubDownloadsDisabled(ConversionError):
    """A model neither on this host (a directory, a package, the hub cache) nor allowed to
    come from the hub: downloads are off (EMBEDGATE_ALLOW_HUB_DOWNLOAD)."""

    exit_code = 10


class HubAccessDenied(ConversionError):
    """The hub refused the model's files: a gated or private repository, without a token or
    with one that has no access (HF_TOKEN in the server's environment)."""

    exit_code = 11


class HubTimeout(ConversionError):
    """The hub stopped sending within huggingface_hub's timeouts (after its own retries);
    the files that arrived whole stay in the hub cache, and the next load downloads the rest."""

    exit_code = 12


class HubUnavailable(ConversionError):
    """The hub could not be reached, dropped the connection for good or answered with a
    server error; the files that arrived whole stay in the hub cache, and the next load
    downloads the rest."""

    exit_code = 13
