"""A download's progress: files and bytes done, told at the start, as each file ends and at
most every half second between, with its numbers beside its words."""

from embedgate.converters.hub import progress as progress_module
from embedgate.converters.hub.progress import DownloadProgress, size_text


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_sizes_for_people():
    assert [size_text(n) for n in (0, 950, 12_345, 1_200_000, 3_400_000_000)] == [
        "0 B", "950 B", "12.3 kB", "1.2 MB", "3.4 GB"
    ]


def test_files_and_bytes_are_told_as_they_come():
    told, clock = [], Clock()
    sizes = {"config.json": 1000, "model.safetensors": 2_000_000}
    progress = DownloadProgress(lambda message, data: told.append((message, data)), "org/m", "c0ffee", sizes, clock)
    progress.begin()
    bar = progress.bar()
    progress.file_done("config.json")
    with bar(total=2_000_000, initial=0, desc="model.safetensors") as file:
        file.update(500_000)  # within half a second of the last: not told
        clock.now += progress_module.INTERVAL_S
        file.update(500_000)
    progress.file_done("model.safetensors")
    messages = [message for message, _ in told]
    assert messages == [
        "downloading org/m: 0 of 2 files, 0 B of 2.0 MB",
        "downloading org/m: 1 of 2 files, 1.0 kB of 2.0 MB",
        "downloading org/m: 1 of 2 files, 1.0 MB of 2.0 MB",
        "downloaded org/m: 2 of 2 files, 2.0 MB of 2.0 MB",
    ]
    assert told[2][1] == {"download": {
        "repo": "org/m", "revision": "c0ffee", "files_done": 1, "files_total": 2,
        "bytes_done": 1_001_000, "bytes_total": 2_001_000,
    }}


def test_a_resumed_file_counts_what_it_had_and_a_restart_takes_it_back():
    told = []
    progress = DownloadProgress(lambda message, data: told.append(data["download"]), "org/m", "c", {"w": 100}, Clock())
    file = progress.bar()(total=100, initial=60)
    assert progress.bytes_done == 60
    file.update(-60)  # the server ignored the range: the file comes again from its start
    file.update(100)
    assert progress.bytes_done == 100
    progress.file_done("w")
    assert told[-1]["bytes_done"] == told[-1]["bytes_total"] == 100
