"""The positions a Qwen2-VL-style vision-language model gives its tokens, computed by the
gateway (numpy) because the library computes them from the image grids as Python values,
which an exported graph would freeze:

- the vision tower's rotary positions: each patch's (row, column) in its image, in the
  order the patches arrive (``spatial_merge_size`` x ``spatial_merge_size`` blocks, row
  after row of blocks), repeated per temporal patch (transformers'
  ``vision_utils.get_vision_position_ids``);
- the language model's multimodal rotary positions (mRoPE): three rows (time, height,
  width); a text token has its running index in all three, an image's tokens their grid
  cell offset by the index the image starts at, and the text after it continues from
  that index plus the image's larger merged side (transformers'
  ``Qwen2VLModel.get_rope_index``). Padding (left or right) takes no position; its value
  is 1, as the library leaves it, and masked.

Rotary attention depends on positions' differences only, so a text batch's positions are
its own tokens' indices whatever its padding.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from embedgate.contract.kinds.vision_language import (
    INTERP_INDICES,
    INTERP_WEIGHTS,
    PATCHES,
    POSITION_IDS,
    WINDOW_IDS,
    PatchImages,
)

# A token's modality, as the processor marks it (``mm_token_type_ids``).
TEXT, IMAGE = 0, 1


def vision_positions(grid: Sequence[int], merge: int) -> np.ndarray:
    """``[patches, 2]`` int64: each patch's (row, column), for one image's ``grid`` (t, h, w)."""
    frames, height, width = (int(value) for value in grid)
    rows, columns = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    blocks = (height // merge, merge, width // merge, merge)
    rows = rows.reshape(blocks).transpose(0, 2, 1, 3).reshape(-1)
    columns = columns.reshape(blocks).transpose(0, 2, 1, 3).reshape(-1)
    return np.tile(np.stack([rows, columns], axis=-1), (frames, 1)).astype(np.int64)


def position_interpolation(grid: Sequence[int], side: int, merge: int) -> tuple[np.ndarray, np.ndarray]:
    """Qwen3-VL's learned ``side`` x ``side`` vision position grid resampled to one image's
    ``grid`` (t, h, w), bilinearly with aligned corners, as each patch's four taps into the
    flattened grid and their weights (``[patches, 4]`` int64 and float32, in the order the
    patches arrive): transformers' ``get_vision_interpolation_indices_and_weights``."""
    frames, height, width = (int(value) for value in grid)
    within = np.arange(frames * height * width) % (height * width)
    columns_of_blocks = width // merge
    rows = (within // (merge * merge * columns_of_blocks)) * merge + (within // merge) % merge
    columns = ((within // (merge * merge)) % columns_of_blocks) * merge + within % merge
    row_taps, row_weights = _axis_taps(rows, height, side)
    column_taps, column_weights = _axis_taps(columns, width, side)
    indices = (row_taps[:, :, None] * side + column_taps[:, None, :]).reshape(-1, 4)
    weights = (row_weights[:, :, None] * column_weights[:, None, :]).reshape(-1, 4)
    return indices.astype(np.int64), weights.astype(np.float32)


def _axis_taps(index: np.ndarray, size: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    """One axis' two taps and their weights (float32 as the library computes them)."""
    source = index.astype(np.float32) * np.float32(side - 1) / np.float32(max(size - 1, 1))
    floor = np.floor(source)
    offsets = np.arange(2)
    taps = np.clip(floor.astype(np.int64)[:, None] + offsets, 0, side - 1)
    distance = np.abs(source[:, None] - floor[:, None] - offsets.astype(np.float32))
    return taps, np.clip(np.float32(1) - distance, 0, None).astype(np.float32)


def attention_windows(
    grid: Sequence[int], merge: int, window: int, patch: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Qwen2.5-VL's windows of one image of ``grid`` (t, h, w) patches: the order its patches
    go through the vision tower in (window after window, each ``window`` pixels square of
    merged patches, row after row), each patch's window in that order, and the order that
    puts the tower's merged rows back (transformers' ``get_vision_window_index``)."""
    frames, height, width = (int(value) for value in grid)
    side = window // merge // patch
    rows, columns = height // merge, width // merge
    pad_rows, pad_columns = side - rows % side, side - columns % side
    index = np.full((frames, rows + pad_rows, columns + pad_columns), -1, dtype=np.int64)
    index[:, :rows, :columns] = np.arange(frames * rows * columns).reshape(frames, rows, columns)
    windows = index.reshape(frames, (rows + pad_rows) // side, side, (columns + pad_columns) // side, side)
    windows = windows.transpose(0, 1, 3, 2, 4).reshape(-1, side * side)
    units = windows[windows >= 0]
    unit_window = np.repeat(np.arange(len(windows)), (windows >= 0).sum(axis=1))
    area = merge * merge
    order = (units[:, None] * area + np.arange(area)).reshape(-1)
    labels = np.unique(unit_window, return_inverse=True)[1].astype(np.int64)  # windows numbered 0, 1, ...
    return order, np.repeat(labels, area), np.argsort(units, kind="stable")


def vision_inputs(
    patches: np.ndarray, grid: Sequence[int], images: PatchImages, position_grid: int = 0, window: int = 0
) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """The vision graph's tensors for one image, and where its output rows are not in the
    image's order (Qwen2.5-VL's windows), the order that puts them back (else None)."""
    merge = images.merge_size
    tensors = {PATCHES: patches, POSITION_IDS: vision_positions(grid, merge)}
    if position_grid:
        tensors[INTERP_INDICES], tensors[INTERP_WEIGHTS] = position_interpolation(grid, position_grid, merge)
    if not window:
        return tensors, None
    order, windows, restore = attention_windows(grid, merge, window, images.patch_size)
    tensors = {name: np.ascontiguousarray(value[order]) for name, value in tensors.items()}
    tensors[WINDOW_IDS] = windows
    return tensors, restore


def text_positions(attention_mask: np.ndarray) -> np.ndarray:
    """``[3, batch, length]`` int64 for a right-padded batch of texts: each token's index in
    its row, in all three rows (padding 1, as in ``token_positions``)."""
    positions = np.where(attention_mask > 0, np.cumsum(attention_mask, axis=1) - 1, 1).astype(np.int64)
    return np.ascontiguousarray(np.broadcast_to(positions, (3, *positions.shape)))


def token_positions(
    attention_mask: np.ndarray, token_types: np.ndarray, grids: Iterable[Sequence[int]], merge: int
) -> np.ndarray:
    """``[3, batch, length]`` int64 for a padded batch; ``grids``: each image's (t, h, w), in
    the order the batch's image tokens come."""
    batch, length = attention_mask.shape
    positions = np.ones((3, batch, length), dtype=np.int64)
    images = iter(grids)
    for row in range(batch):
        kept = np.flatnonzero(attention_mask[row])
        types = token_types[row, kept]
        parts, at, start = [], 0, 0
        while start < len(types):
            stop = start + 1
            while stop < len(types) and types[stop] == types[start]:
                stop += 1
            if types[start] == TEXT:
                parts.append(np.broadcast_to(np.arange(stop - start) + at, (3, stop - start)))
                at += stop - start
            else:
                frames, height, width = (int(value) for value in next(images))
                time_, rows, columns = np.meshgrid(
                    np.arange(frames), np.arange(height // merge), np.arange(width // merge), indexing="ij"
                )
                parts.append(np.stack([time_, rows, columns]).reshape(3, -1) + at)
                at += max(height, width) // merge
            start = stop
        if parts:
            positions[:, row, kept] = np.concatenate(parts, axis=1)
    return positions
