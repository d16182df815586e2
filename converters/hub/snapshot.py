"""A hub repository's snapshot at a revision, in the hub cache, for the libraries to load as
a directory.

- The cache first: a snapshot of the revision (``main`` where the load names none) whose
  every needed file (``files.py``) is there, as its listing in the cache says, is used as it
  is, without a request to the hub. A name that is not on this host otherwise is refused
  when downloads are off (``HubDownloadsDisabled``).
- Else from the hub, file by file in this thread: the revision's listing (``model_info``:
  its commit, its files and their sizes), then each needed file through huggingface_hub's
  ``hf_hub_download`` (its cache layout, its locks, its resume of a partial file by a Range
  request, its redirects), its bytes counted into the progress (``progress.py``); last, the
  snapshot is recorded as the hub records it (the revision's ref, its listing), which is
  what makes it whole for the next conversion and for the gateway's comparison of sources.
  A file is in the snapshot only once it arrived whole: huggingface_hub writes it to a file
  of its own and moves it in place at its end, resumes a connection cut under it by a Range
  request from the bytes it has (while bytes keep coming, within its retries), and removes
  what it has when it gives up. So a failed download leaves no part of a file, the files
  that arrived whole stay, and the next load downloads only the others.
- Its failures are the conversion's own errors (``failures.py``).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path

from embedgate.contract.errors import ConversionError, HubDownloadsDisabled
from embedgate.contract.sources import hub_cache_dir, hub_snapshot
from embedgate.contract.sources.locate import DEFAULT_REVISION
from embedgate.converters.hub.failures import classified
from embedgate.converters.hub.files import needed
from embedgate.converters.hub.progress import DownloadProgress, Report


@dataclass(frozen=True)
class Snapshot:
    repo_id: str
    path: Path  # the snapshot's directory in the hub cache
    commit: str

    def described(self) -> str:
        """For metadata.json's ``source`` and messages: the repository and its commit, no path."""
        return f"hub:{self.repo_id} (revision {self.commit})"


def fetch(
    repo_id: str, revision: str | None, *, allow_network: bool, report: Report, endpoint: str | None = None
) -> Snapshot:
    """``repo_id`` at ``revision`` in the hub cache; ``endpoint``: the hub's URL (default
    HF_ENDPOINT, read by huggingface_hub)."""
    cached = cached_snapshot(repo_id, revision, whole=allow_network)
    if cached is not None:
        report(f"using the hub cache's copy of {repo_id} (revision {cached.commit}): nothing to download")
        return cached
    if not allow_network:
        raise HubDownloadsDisabled(
            f"model '{repo_id}' is not on this server (no model_path, no installed package, not in the hub cache"
            f"{' at revision ' + repr(revision) if revision else ''}) and downloads from the hub are off: set "
            "EMBEDGATE_ALLOW_HUB_DOWNLOAD=true, or load it from a directory with model_path"
        )
    downloading: list[str] = []
    try:
        return _download(repo_id, revision, report, endpoint, downloading)
    except ConversionError:
        raise
    except Exception as error:
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise  # the disk's doing, not the hub's: the converter says so
        failure = classified(error, repo_id, revision, downloading[-1] if downloading else None)
        if failure is None:
            raise
        raise failure from error


def cached_snapshot(repo_id: str, revision: str | None, *, whole: bool = True) -> Snapshot | None:
    """The hub cache's snapshot of ``repo_id`` at ``revision`` where it holds every needed
    file its listing names; ``whole`` False: any snapshot there (downloads are off, so it
    is the only copy there is: one the libraries fetched themselves has no listing)."""
    found = hub_snapshot(repo_id, revision)
    if found is None:
        return None
    path, commit = found
    from huggingface_hub import get_cached_repo_tree
    from huggingface_hub.errors import CachedRepoTreeNotFoundError

    try:
        listed = [entry.path for entry in get_cached_repo_tree(repo_id, revision=commit, cache_dir=hub_cache_dir())]
    except (CachedRepoTreeNotFoundError, OSError, ValueError):
        return None if whole else Snapshot(repo_id, path, commit)
    if all((path / name).is_file() for name in needed(listed)):
        return Snapshot(repo_id, path, commit)
    return None


def _download(
    repo_id: str, revision: str | None, report: Report, endpoint: str | None, downloading: list[str]
) -> Snapshot:
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download

    cache = hub_cache_dir()
    report(f"asking the hub for {repo_id}" + (f" at revision {revision}" if revision else ""))
    info = HfApi(endpoint=endpoint).model_info(repo_id, revision=revision, files_metadata=True)
    commit = info.sha
    if not commit:
        raise ConversionError(f"the hub gave no commit for '{repo_id}'")
    sizes = {sibling.rfilename: int(sibling.size or 0) for sibling in info.siblings or ()}
    files = needed(sizes)
    progress = DownloadProgress(report, repo_id, commit, {name: sizes[name] for name in files})
    progress.begin()
    bar = progress.bar()
    for name in files:
        downloading.append(name)
        hf_hub_download(repo_id, name, revision=commit, cache_dir=cache, endpoint=endpoint, tqdm_class=bar)
        progress.file_done(name)
    downloading.append("")  # no file of its own: the repository
    # The revision's ref and listing, as snapshot_download keeps them; every file is there,
    # so it downloads nothing more (unless the revision moved meanwhile: then its new files).
    path = snapshot_download(
        repo_id, revision=revision or DEFAULT_REVISION, cache_dir=cache, endpoint=endpoint, allow_patterns=files
    )
    return Snapshot(repo_id, Path(path), Path(path).name)
