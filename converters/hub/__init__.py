"""Models from the Hugging Face hub: a repository's snapshot at a revision, downloaded file by
file into the hub cache with its progress reported (``snapshot.py``, ``progress.py``), only
the files the libraries load (``files.py``), and the hub's failures told as the conversion's
own errors (``failures.py``). The libraries then load the snapshot's directory: they never
reach the hub themselves."""
