"""Cluster specs: the real node lists, presets, padding, and node-file validation."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from jaxsched import cluster as C
from jaxsched.errors import DataError
from jaxsched.types import ALL_MODELS
from tests.assertions import assert_names

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"


def type_counts(table: C.NodeTable) -> collections.Counter:
    return collections.Counter(
        (C.MODEL_NAMES[m], int(g), int(c), int(mem))
        for m, g, c, mem in zip(table.model, table.num_gpus, table.cpu_milli, table.mem_mib))


# ---------------------------------------------------------------- real node lists


def test_openb_gpu_node_list(openb_dir):
    t = C.load_openb_nodes(openb_dir / "openb_node_list_gpu_node.csv")
    assert len(t) == 1213
    assert t.total_gpus == 6212
    assert set(np.unique(t.num_gpus)) == {1, 2, 4, 8}
    models = {C.MODEL_NAMES[m] for m in t.model}
    assert models == {"G2", "T4", "P100", "G3", "V100M16", "V100M32", "A10"}
    # The hard-coded node-type table behind preset() is exactly the real list's mix.
    expected = {(m, g, c, mem): k for m, g, c, mem, k in C.OPENB_NODE_TYPES}
    assert type_counts(t) == expected


def test_openb_all_node_list(openb_dir):
    t = C.load_openb_nodes(openb_dir / "openb_node_list_all_node.csv")
    gpu = C.load_openb_nodes(openb_dir / "openb_node_list_gpu_node.csv")
    assert len(t) == 1523
    cpu_only = t.num_gpus == 0
    assert cpu_only.sum() == 310
    assert (t.model[cpu_only] == C.model_id("CPU")).all()
    assert t.total_gpus == gpu.total_gpus == 6212


def test_pai_machine_spec(pai_dir):
    t = C.load_pai_machines(pai_dir / "pai_machine_spec.csv")
    assert len(t) == 1897
    assert t.total_gpus == 6742
    per = collections.Counter((C.MODEL_NAMES[m], int(g)) for m, g in zip(t.model, t.num_gpus))
    assert per == {("P100", 2): 798, ("T4", 2): 497, ("MISC", 8): 280, ("V100M32", 8): 135,
                   ("V100", 8): 104, ("CPU", 0): 83}
    # cap_cpu cores -> milli, cap_mem GB -> MiB
    first = (pai_dir / "pai_machine_spec.csv").read_text().splitlines()[0].split(",")
    assert t.names[0] == first[0]
    assert t.cpu_milli[0] == int(first[2]) * 1000 and t.mem_mib[0] == int(first[3]) * 1024


# ---------------------------------------------------------------- presets and padding


@pytest.mark.parametrize("n", [32, 64, 128])
def test_preset_keeps_the_openb_mix(n):
    t = C.preset(n)
    assert len(t) == n
    assert len(set(t.names)) == n
    counts = type_counts(t)
    total = sum(k for *_, k in C.OPENB_NODE_TYPES)
    for m, g, c, mem, k in C.OPENB_NODE_TYPES:
        share = k / total * n
        # largest remainder: every type gets floor or ceil of its proportional share
        assert np.floor(share) <= counts.get((m, g, c, mem), 0) <= np.ceil(share)
    # the dominant 8-GPU G2 nodes stay the largest group, 2-GPU T4 nodes the second
    top = [key for key, _ in counts.most_common(2)]
    assert top == [("G2", 8, 96000, 393216), ("T4", 2, 104000, 524288)]


def test_preset_full_size_is_the_real_list():
    t = C.preset(1213)
    assert t.total_gpus == 6212
    assert type_counts(t) == {(m, g, c, mem): k for m, g, c, mem, k in C.OPENB_NODE_TYPES}


def test_preset_rejects_zero_nodes():
    with pytest.raises(DataError, match="num_nodes"):
        C.preset(0)


def test_groups_build_servers_group_after_group_with_cpu_and_memory_per_gpu():
    t = C.groups([("V100", 2, 1), ["K80", 1, 4]])  # a TOML list works as well as a tuple
    assert t.names == ("v100-0000", "v100-0001", "k80-0002")
    assert t.model.tolist() == [C.model_id("V100")] * 2 + [C.model_id("K80")]
    assert t.num_gpus.tolist() == [1, 1, 4]
    assert t.cpu_milli.tolist() == [8000, 8000, 32000] and t.mem_mib.tolist() == [32768, 32768, 131072]
    assert C.work_capacity(t) == 2 * 1.0 + 4 * 0.3  # the K80's default speed
    for bad, problem in (([("CPU", 1, 1)], "unknown GPU model"), ([("V100", 1, 0)], "GPUs per server"),
                         ([("V100", True, 1)], "servers"), ([], "expected"), ([("V100", 1)], "expected")):
        with pytest.raises(DataError, match=problem) as e:
            C.groups(bad)
        assert_names(e.value, "cluster", None, "node_groups")


def test_to_cluster_pads_nodes_and_gpus():
    t = C.preset(32)
    c = C.to_cluster(t, pad_nodes=40)
    assert c.num_nodes == 40 and c.max_gpus == C.MAX_GPUS_PER_NODE
    assert c.valid[:32].all() and not c.valid[32:].any()
    assert (c.gpu_exists.sum(1)[:32] == t.num_gpus).all()
    assert not c.gpu_exists[32:].any()
    # GPU g exists iff g < num_gpus: the existing GPUs are a prefix of each row
    for n in range(32):
        row = c.gpu_exists[n]
        assert row[: t.num_gpus[n]].all() and not row[t.num_gpus[n]:].any()
    assert (c.num_gpus[32:] == 0).all() and (c.cpu_milli[32:] == 0).all()
    assert (c.gpu_model[32:] == C.model_id("CPU")).all()
    assert np.allclose(c.speed[:32], [C.DEFAULT_SPEEDS[C.MODEL_NAMES[m]] for m in t.model])


def test_to_cluster_speed_override_and_errors():
    t = C.preset(32)
    c = C.to_cluster(t, speeds={"G2": 2.0})
    assert np.allclose(c.speed[t.model == C.model_id("G2")], 2.0)
    assert np.allclose(c.speed[t.model == C.model_id("T4")], C.DEFAULT_SPEEDS["T4"])
    with pytest.raises(DataError, match="pad_nodes"):
        C.to_cluster(t, pad_nodes=31)
    with pytest.raises(DataError, match="max_gpus"):
        C.to_cluster(t, max_gpus=4)
    with pytest.raises(DataError, match="T4"):
        C.to_cluster(t, speeds={"T4": 0.0})


def test_model_mask_bits():
    assert C.model_mask(["T4", "T4"]) == 1 << C.model_id("T4")
    assert C.model_mask(["V100M16", "V100M32"]) == 0b11
    assert C.model_mask(C.MODEL_NAMES) & (1 << C.model_id("G3"))
    assert ALL_MODELS & (1 << C.model_id("CPU"))


# ---------------------------------------------------------------- malformed node files


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


GOOD = "n0,8000,32768,1,V100M16\n"


@pytest.mark.parametrize("body, line, field, problem", [
    (GOOD + "n1,abc,32768,1,T4\n", 3, "cpu_milli", "not a number"),
    (GOOD + GOOD.replace("n0", "n1") + "n2,8000,-5,1,T4\n", 4, "memory_mib", ">= 0"),
    (GOOD + "n1,8000,32768,1.5,T4\n", 3, "gpu", "whole"),
    (GOOD + "n1,8000,32768,16,T4\n", 3, "gpu", "16 GPUs"),
    (GOOD + "n1,8000,32768,2,H100\n", 3, "model", "unknown GPU model"),
    (GOOD + "n0,8000,32768,1,T4\n", 3, "sn", "duplicate sn 'n0'"),
    (GOOD + "n1,8000,32768,1,T4,extra\n", 3, None, "6 fields"),
    (GOOD + "n1,8000,32768,2,CPU\n", 3, "model", "2 GPUs on a node whose model is CPU"),
])
def test_malformed_openb_nodes(tmp_path, body, line, field, problem):
    p = write(tmp_path, "nodes.csv", NODE_HEADER + body)
    with pytest.raises(DataError, match=problem) as e:
        C.load_openb_nodes(p)
    assert_names(e.value, p, line, field)


def test_node_files_that_are_not_text_are_named(tmp_path):
    p = tmp_path / "nodes.csv"
    p.write_bytes(b"\x1f\x8b\x08compressed")
    for load in (C.load_openb_nodes, C.load_pai_machines):
        with pytest.raises(DataError, match="gzip") as e:
            load(p)
        assert_names(e.value, p, None, None)
        with pytest.raises(DataError, match="file not found"):
            load(tmp_path / "missing.csv")


def test_openb_nodes_missing_column(tmp_path):
    p = write(tmp_path, "nodes.csv", "sn,cpu_milli,gpu,model\nn0,8000,1,T4\n")
    with pytest.raises(DataError, match="missing column") as e:
        C.load_openb_nodes(p)
    assert_names(e.value, p, 1, "memory_mib")


def test_openb_nodes_empty_and_header_only(tmp_path):
    p = write(tmp_path, "empty.csv", "")
    with pytest.raises(DataError, match="empty") as e:
        C.load_openb_nodes(p)
    assert_names(e.value, p, None, None)
    p = write(tmp_path, "header.csv", NODE_HEADER)
    with pytest.raises(DataError, match="no nodes") as e:
        C.load_openb_nodes(p)
    assert_names(e.value, p, None, None)


def test_cpu_only_node_gets_cpu_model(tmp_path):
    p = write(tmp_path, "nodes.csv", NODE_HEADER + GOOD + "c0,64000,262144,0,\n")
    t = C.load_openb_nodes(p)
    assert t.model.tolist() == [C.model_id("V100M16"), C.model_id("CPU")]


@pytest.mark.parametrize("body, line, field, problem", [
    ("m0,P100,64,512,2\nm1,T4,x,512,2\n", 2, "cap_cpu", "not a number"),
    ("m0,P100,64,512,2\nm1,T4,64,512,-2\n", 2, "cap_gpu", ">= 0"),
    ("m0,P100,64,512,2\nm1,H100,64,512,2\n", 2, "gpu_type", "unknown GPU model"),
])
def test_malformed_pai_machines(tmp_path, body, line, field, problem):
    p = write(tmp_path, "machines.csv", body)
    with pytest.raises(DataError, match=problem) as e:
        C.load_pai_machines(p)
    assert_names(e.value, p, line, field)


def test_pai_machines_wrong_field_count_names_the_line(tmp_path):
    p = write(tmp_path, "machines.csv", "m0,P100,64,512,2\nm1,T4,64\n")
    with pytest.raises(DataError, match="expected 5 fields") as e:
        C.load_pai_machines(p)
    assert e.value.path == str(p) and e.value.row == 2 and e.value.field == "cap_mem"


def test_openb_nodes_short_row_is_a_data_error(tmp_path):
    p = write(tmp_path, "nodes.csv", NODE_HEADER + GOOD + "n1,8000\n")
    with pytest.raises(DataError) as e:
        C.load_openb_nodes(p)
    assert_names(e.value, p, 3, "memory_mib")


def test_openb_nodes_line_numbers_count_blank_lines(tmp_path):
    p = write(tmp_path, "nodes.csv", NODE_HEADER + "\n" + GOOD + "n1,x,32768,1,T4\n")
    with pytest.raises(DataError) as e:
        C.load_openb_nodes(p)
    assert_names(e.value, p, 4, "cpu_milli")


def test_openb_nodes_value_beyond_int32_is_a_data_error(tmp_path):
    p = write(tmp_path, "nodes.csv", NODE_HEADER + "n0,99999999999,32768,1,T4\n")
    with pytest.raises(DataError) as e:
        C.load_openb_nodes(p)
    assert_names(e.value, p, 2, "cpu_milli")
