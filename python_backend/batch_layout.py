"""Where a batch's requests are cut into parts (and the threads that run the parts side by
side), and its text rows into onnxruntime runs and packed into rows: numpy and the
standard library, for the Python-backend model (``model.py``), which
imports it from beside itself in the model's version directory, where the converter
copies both.
"""

import heapq
import queue
import threading

import numpy as np

# Row counts ``pack_rows`` tries for a batch, from the fewest that can hold its tokens.
PACK_ROW_COUNTS = 3
# Most rows in one part of a merged batch of fixed-shape rows (images, CLIP token ids),
# each a whole model pass: small enough that an answer waits for little beyond the work
# ahead of it, large enough that a run's fixed cost is nothing beside its rows.
PART_ROWS = 16


def plan_sub_batches(lengths, max_rows, overhead_tokens):
    """Cut rows sorted by length into runs ``[(start, end), ...]`` of at most ``max_rows``.

    A run of ``n`` rows padded to its longest row ``w`` costs about ``overhead + n * w``
    token-steps: a fixed part (onnxruntime streams every weight once per run, whatever
    its size) and the padded tokens. Few long runs pad much; many short ones pay the
    fixed part often. The cut with the least total cost is found by dynamic programming
    over the places a run may end (``_cheapest_cut``): after any row.
    With ``overhead_tokens <= 0`` the rows are cut into runs of exactly ``max_rows``.

    Where every row fits one run (``max_rows`` at least the rows, as on a GPU instance),
    the same cost is found with far less work: one run, where all its padding costs no
    more than one more run would (more runs cannot pad less than none); else runs end only
    where the length changes (a cut inside rows of one length never helps: moving the rest
    of them into the run before costs that run what it saves the next, and where that
    empties the next, saves its fixed part).
    """
    count = len(lengths)
    if overhead_tokens <= 0:
        return [(start, min(start + max_rows, count)) for start in range(0, count, max_rows)]
    if count == 0:
        return []
    widths = np.asarray(lengths, dtype=np.float64)
    if count > max_rows:
        ends = np.arange(1, count + 1)
    elif count * widths[-1] - widths.sum() <= overhead_tokens:
        return [(0, count)]
    else:
        ends = np.append(np.flatnonzero(np.diff(widths)) + 1, count)
    return _cheapest_cut(widths, ends, max_rows, overhead_tokens)


def _cheapest_cut(widths, ends, max_rows, overhead_tokens):
    """The runs of least cost over sorted ``widths`` that end only at ``ends`` (ascending,
    the last one every row), each of at most ``max_rows``: each candidate end's best cut,
    from the best cuts before it (vectorised over the runs it may close)."""
    starts = np.append(0, ends[:-1])  # where a run that ends at the next candidate starts
    best = np.zeros(len(ends) + 1)  # best[j]: least cost of the rows before ends[j - 1]
    cut = np.zeros(len(ends) + 1, dtype=np.int64)  # best[j]'s last run starts at starts[cut[j]]
    first, opens = 0, starts.tolist()
    for j, end in enumerate(ends.tolist(), start=1):
        while opens[first] < end - max_rows:  # the first run it may close: at most max_rows
            first += 1
        costs = best[first:j] + overhead_tokens + (end - starts[first:j]) * widths[end - 1]
        pick = first + int(np.argmin(costs))
        best[j], cut[j] = costs[pick - first], pick
    runs = []
    j = len(ends)
    while j > 0:
        runs.append((int(starts[cut[j]]), int(ends[j - 1])))
        j = int(cut[j])
    return runs[::-1]


def pack_rows(lengths, width):
    """Texts (row indices) laid into rows of at most ``width`` tokens, so that the run
    computes few token slots: its rows times its fullest row.

    Two ways are tried and the one with fewer slots wins. First fit decreasing (longest
    text first, into the first row with room) fills rows to the brim, which suits many
    texts. Balancing (longest first, into the emptiest of a given number of rows) leaves
    the rows about equally full, which suits a few texts, whose first-fit rows may end
    ragged; ``PACK_ROW_COUNTS`` row counts are tried, from the fewest that fit.
    """
    # Python ints, not numpy's: the loops below touch every text several times, and a
    # numpy scalar costs several times an int (this runs in the stub for every batch).
    lengths = np.asarray(lengths)
    order = np.argsort(-lengths, kind="stable").tolist()
    sizes = lengths.tolist()
    best, fullest = _first_fit(sizes, order, width)
    best_slots = len(best) * fullest
    count, tried = max(1, -(-sum(sizes) // width)), 0
    while tried < PACK_ROW_COUNTS and count <= len(sizes) and count * sizes[order[0]] < best_slots:
        rows, fullest = _balanced(sizes, order, count)
        count += 1
        if fullest > width:
            continue
        tried += 1
        if len(rows) * fullest < best_slots:
            best, best_slots = rows, len(rows) * fullest
    return best


def _first_fit(lengths, order, width):
    """Rows by first fit decreasing, and the tokens of the fullest."""
    rows, room = [], []
    for text in order:
        length = lengths[text]
        for row, free in enumerate(room):
            if length <= free:
                rows[row].append(text)
                room[row] -= length
                break
        else:
            rows.append([text])
            room.append(width - length)
    return rows, width - min(room)


def _balanced(lengths, order, count):
    """Rows by dealing texts longest first to the emptiest of ``count``, and the tokens of
    the fullest."""
    rows = [[] for _ in range(count)]
    heap = [(0, row) for row in range(count)]
    for text in order:
        tokens, row = heap[0]
        rows[row].append(text)
        heapq.heapreplace(heap, (tokens + lengths[text], row))
    return [row for row in rows if row], max(tokens for tokens, _ in heap)


def split_requests(rows, count, part_rows=0):
    """The requests of a batch (``rows``: each one's row count), in order, cut into parts of
    about equal rows: ``[[index, ...], ...]``. At least ``count`` parts (one per thread) and,
    with ``part_rows``, enough for parts of at most that many rows; never more than one per
    request. A new part begins where a request's middle passes the current part's share."""
    total = sum(rows)
    if part_rows > 0:
        count = max(count, -(-total // part_rows))
    count = max(1, min(count, len(rows)))
    parts, part, done = [], [], 0
    for index, n in enumerate(rows):
        if part and len(parts) < count - 1 and (done + n / 2) * count > total * (len(parts) + 1):
            parts.append(part)
            part = []
        part.append(index)
        done += n
    return parts + [part]


def per_token(output):
    """Whether a config output has a value per token (``dims: [-1, ...]``: a multi-vector
    model's vectors), which each run fills to its own width and each request gets cut back
    to its own."""
    return [int(d) for d in output.get("dims", [])][:1] == [-1]


def batch_outputs(outputs, rows, width, per_token_outputs):
    """Arrays for a batch's ``rows`` outputs, shaped as the first run's ``outputs``; a
    per-token one ``width`` wide (zeros past a run's own width)."""
    return [
        np.zeros((rows, width) + out.shape[2:], out.dtype) if wide else np.empty((rows,) + out.shape[1:], out.dtype)
        for out, wide in zip(outputs, per_token_outputs)
    ]


def request_part(values, start, rows, width, wide):
    """One request's part of a batch's output: its rows, and its own width (``width``: the
    rest of its first input's shape) if per token."""
    return np.ascontiguousarray(values[start : start + rows, : width[0]] if wide else values[start : start + rows])


class PartThreads:
    """``count`` threads, each running one batch at a time with ``answer`` and sending
    each request its response (the final one: ``final_flag``) through the request's response
    sender; a batch that raises gets ``failed(message)`` for each request. onnxruntime
    releases the GIL while it runs, so the runs go side by side."""

    def __init__(self, count, answer, rows, part_rows, final_flag, failed):
        self.answer, self.rows, self.count, self.part_rows = answer, rows, count, part_rows
        self.final_flag, self.failed = final_flag, failed
        self.batches = queue.SimpleQueue()
        self.free = threading.Semaphore(count)
        self.threads = [threading.Thread(target=self._work, daemon=True, name=f"part-thread-{n}") for n in range(count)]
        for thread in self.threads:
            thread.start()

    def submit(self, requests):
        """Hand the batch to the threads in parts (``split_requests``), each as one frees,
        then wait until another is free: Triton sends the next batch only when ``execute``
        returns. Whole, a merged batch would run on one thread while the others idled."""
        for part in self._parts(requests):
            self.free.acquire()
            self.batches.put(part)
        self.free.acquire()
        self.free.release()

    def _parts(self, requests):
        rows = list(map(self.rows, requests)) if len(requests) > 1 else [1]  # one request: one part
        parts = split_requests(rows, self.count, self.part_rows)
        return [[requests[i] for i in part] for part in parts]

    def stop(self):
        for _ in self.threads:
            self.batches.put(None)
        for thread in self.threads:
            thread.join(timeout=10)

    def _work(self):
        while True:
            requests = self.batches.get()
            if requests is None:
                return
            try:
                try:
                    responses = self.answer(requests)
                except Exception as error:  # noqa: BLE001 - reported to every request of the batch
                    responses = [self.failed(f"the model failed: {error}")] * len(requests)
                for request, response in zip(requests, responses):
                    try:
                        request.get_response_sender().send(response, flags=self.final_flag)
                    except Exception:  # noqa: BLE001 - the request is gone (cancelled); answer the rest
                        pass
            finally:
                self.free.release()


def packed_feeds(ids, lengths, run_rows, texts, width):
    """The packed graph's inputs for ``run_rows`` (each row's texts end to end, the fullest
    ``width`` tokens), built with
    array operations (per text in Python it was the stub's largest cost after the model):
    each token's row and column, its position in its text, its text's segment in the row,
    and, for each text, where its tokens are in the run (past the last token: the graph's
    zero row)."""
    sizes = lengths[texts]
    counts = [len(row) for row in run_rows]
    row_of = np.repeat(np.arange(len(run_rows)), counts)
    # Each text's first column: the tokens of the texts before it in its row.
    ends = np.cumsum(sizes)
    row_starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    before = ends - sizes
    start = before - before[row_starts][row_of]
    segment = np.arange(len(texts)) - row_starts[row_of] + 1
    token_row = np.repeat(row_of, sizes)
    position = np.arange(int(ends[-1])) - np.repeat(before, sizes)
    column = np.repeat(start, sizes) + position
    input_ids = np.zeros((len(run_rows), width), dtype=np.int64)
    position_ids = np.zeros_like(input_ids)
    segment_ids = np.zeros_like(input_ids)
    input_ids[token_row, column] = ids[np.repeat(texts, sizes), position]
    position_ids[token_row, column] = position
    segment_ids[token_row, column] = np.repeat(segment, sizes)
    token_index = np.full((len(texts), int(sizes.max())), len(run_rows) * width, dtype=np.int64)
    token_index[np.repeat(np.arange(len(texts)), sizes), position] = token_row * width + column
    return input_ids, position_ids, segment_ids, token_index
