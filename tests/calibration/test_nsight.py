"""Nsight Systems SQLite exports: a small report written in the export's schema, read as kernel times.

The tables and columns are those of Nsight Systems' SQLite export (``StringIds``,
``CUPTI_ACTIVITY_KIND_KERNEL``, ``CUPTI_ACTIVITY_KIND_RUNTIME``, ``NVTX_EVENTS``); the range texts are
``torch.autograd.profiler.emit_nvtx(record_shapes=True)``'s.
"""

import sqlite3

import pandas as pd
import pytest

from sappkit import InputError, read_kernel_times

SCHEMA = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, gridX INTEGER NOT NULL,
    gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL,
    blockZ INTEGER NOT NULL, registersPerThread INTEGER NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
    globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL,
    callchainId INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
    category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
    domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER,
    int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
"""
THREAD = 281474976710657
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm *, unsigned long, ncclWork *)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>"
#: (NVTX range start, end, text) on the launching thread: nested as emit_nvtx nests them.
RANGES = [
    (1_000, 9_000, "aten::linear, seq = 3, op_id = 5, sizes = [[4096, 4096], [11008, 4096], []]"),
    (2_000, 8_000, "aten::matmul, op_id = 6, sizes = [[4096, 4096], [4096, 11008]]"),
    (3_000, 7_000, "aten::mm, seq = 3, op_id = 7, sizes = [[4096, 4096], [4096, 11008]], input_op_ids = [(5, 0)]"),
    (10_000, 19_000, "aten::_flash_attention_forward, op_id = 9, sizes = [[1, 4096, 32, 128], [1, 4096, 32, 128], "
                     "[1, 4096, 32, 128], [], [], [], [], [], []]"),
    (20_000, 29_000, "nccl:all_reduce, op_id = 11, sizes = [[1048576]]"),
    (30_000, 39_000, "aten::add, seq = 4, op_id = 12, sizes = [[4096, 4096], [4096, 4096], []]"),
]
#: (correlation id, launch start, kernel name, kernel start, kernel end): one launch outside every range.
KERNELS = [(101, 4_000, GEMM, 50_000, 1_250_000), (102, 12_000, FLASH, 1_300_000, 2_100_000),
           (103, 21_000, NCCL, 2_200_000, 2_700_000), (104, 31_000, ADD, 2_800_000, 2_810_000),
           (105, 45_000, FLASH, 2_900_000, 3_000_000)]


def _report(path, *, text_ids: bool):
    database = sqlite3.connect(path)
    database.executescript(SCHEMA)
    names = sorted({name for *_, name, _, _ in KERNELS} | {text for *_, text in RANGES})
    ids = {name: index for index, name in enumerate(names, start=1)}
    database.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, name) for name, i in ids.items()])
    for correlation, launch, name, start, end in KERNELS:
        database.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, 0, 0, 0)",
                         (launch, launch + 500, THREAD, correlation))
        database.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, 7, ?, 1, ?, ?, 0, 1, 1, 1, 128, "
                         "1, 1, 168)", (start, end, correlation, ids[name], ids[name]))
    for start, end, text in RANGES:
        database.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId) VALUES "
                         "(?, ?, 59, ?, ?, ?)", (start, end, None if text_ids else text, THREAD,
                                                  ids[text] if text_ids else None))
    database.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (0, 50000, 34, "
                     "'a mark, not a range', ?)", (THREAD,))
    database.commit()
    database.close()
    return path


@pytest.mark.parametrize("text_ids", [False, True])
def test_an_nsight_export_gives_its_gemms_attention_and_collectives(tmp_path, text_ids):
    frame = read_kernel_times(_report(tmp_path / "report.sqlite", text_ids=text_ids))
    assert frame["kind"].tolist() == ["gemm", "attention", "collective", "attention"]
    gemm = frame.iloc[0]
    assert (gemm["op"], gemm["m"], gemm["n"], gemm["k"], gemm["batch"], gemm["dtype"]) == \
        ("aten::mm", 4096, 11008, 4096, 1, "c10::BFloat16")
    assert gemm["duration_ms"] == pytest.approx(1.2) and gemm["flops"] == 2.0 * 4096 * 11008 * 4096
    assert gemm["nbytes"] == 2.0 * (4096 * 4096 + 4096 * 11008 + 4096 * 11008)
    flash = frame.iloc[1]
    assert flash["op"] == "aten::_flash_attention_forward" and flash["duration_ms"] == pytest.approx(0.8)
    assert flash["flops"] == 4.0 * 1 * 32 * 4096 * 4096 * 128
    nccl = frame.iloc[2]
    assert (nccl["collective"], nccl["nbytes"], nccl["ranks"], nccl["dtype"]) == \
        ("all_reduce", 2.0 * 1048576, 1, "c10::BFloat16")
    unlaunched = frame.iloc[3]  # launched outside every range: the kernel's name says attention, no shapes
    assert pd.isna(unlaunched["op"]) and pd.isna(unlaunched["flops"])


def test_a_sqlite_file_that_is_no_nsight_export_is_refused(tmp_path):
    path = tmp_path / "other.sqlite"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(InputError) as error:
        read_kernel_times(path)
    assert str(error.value) == (f"{path}: not an Nsight Systems SQLite export with CUPTI_ACTIVITY_KIND_KERNEL, "
                                "CUPTI_ACTIVITY_KIND_RUNTIME, NVTX_EVENTS and StringIds (no such table: "
                                "CUPTI_ACTIVITY_KIND_KERNEL)")
