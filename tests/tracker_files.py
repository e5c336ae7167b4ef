"""Readers of what the trackers write, independent of them: TensorBoard event files and W&B's offline run log."""

import json
import pathlib
import struct
import time


def _tfrecords(path):
  """The payloads of a TFRecord file: per record a length (uint64), its CRC, the bytes and their CRC."""
  data = pathlib.Path(path).read_bytes()
  pos = 0
  while pos + 12 <= len(data):
    (length,) = struct.unpack("<Q", data[pos:pos + 8])
    yield data[pos + 12:pos + 12 + length]
    pos += 12 + length + 4


def tensorboard_scalars(folder):
  """{tag: [(step, value), ...]} of every scalar in the event files under ``folder``."""
  from tensorboardX.proto import event_pb2  # pylint: disable=g-import-not-at-top

  out = {}
  for path in sorted(pathlib.Path(folder).glob("events.out.tfevents.*")):
    for payload in _tfrecords(path):
      event = event_pb2.Event()
      event.ParseFromString(payload)
      for value in event.summary.value:
        out.setdefault(value.tag, []).append((event.step, value.simple_value))
  return out


def _leveldb_records(data, start=7, block=32768):
  """The records of a LevelDB-style log (W&B's .wandb file after its 7-byte header): chunks of 32 KiB blocks."""
  pos, parts = start, b""
  while pos + 7 <= len(data):
    left = block - pos % block
    if left < 7:  # a block's tail too short for a header is padding
      pos += left
      continue
    _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
    chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
    if kind == 1:  # a whole record
      yield chunk
    elif kind in (2, 3):  # its first or a middle part
      parts = (parts if kind == 3 else b"") + chunk
    elif kind == 4:  # its last part
      yield parts + chunk
    else:
      return


def _wandb_records(path):
  from wandb.proto import wandb_internal_pb2  # pylint: disable=g-import-not-at-top

  data = pathlib.Path(path).read_bytes()
  assert data[:4] == b":W&B", path
  for payload in _leveldb_records(data):
    record = wandb_internal_pb2.Record()
    record.ParseFromString(payload)
    yield record


def wandb_history(folder, timeout=30.0):
  """The history rows ({key: value}, W&B's own ``_``-keys left out) of the offline runs under ``folder``.

  W&B's service may still be writing a run's file after ``finish`` returns: each file is read once it holds
  the run's exit record (waiting up to ``timeout`` seconds).
  """
  rows = []
  for path in sorted(pathlib.Path(folder).glob("wandb/offline-run-*/*.wandb")):
    deadline = time.monotonic() + timeout
    while not any(r.WhichOneof("record_type") == "exit" for r in _wandb_records(path)):
      assert time.monotonic() < deadline, f"{path} has no exit record after {timeout} s"
      time.sleep(0.05)
    for record in _wandb_records(path):
      if record.WhichOneof("record_type") == "history":
        items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
        rows.append({k: v for k, v in items.items() if not k.startswith("_") or k == "_step"})
  return rows
