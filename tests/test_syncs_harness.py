"""The harness runs the REAL `_attach_unified_kv_prefill_meta` of four releases alone."""

from __future__ import annotations

import shutil
import time

import pytest

from diag.probes.metadata_syncs import builder_harness as h

pytestmark = pytest.mark.release

EXPECTED = {  # CPU counts per call (2 = repeat_interleave without output_size)
    "0.5.17": {"draft-extend": 2, "target-extend": 2},  # no output_size anywhere
    "0.5.18": {"draft-extend": 0, "target-extend": 2},  # #29202: draft-extend path only
    # `output_size=num_tokens if exact_num_tokens else None` (0.5.20 :1348), the caller passing
    # its `exact_num_tokens` (:594), which the prefill call sets to is_draft (:1212)
    "0.5.20": {"draft-extend": 0, "target-extend": 2},
    # the caller passes `exact_num_tokens or host_proves_exact_num_tokens` (0.5.23 :1236), the
    # local `need_compress and not attach_decode_streams and extend_seq_lens_cpu is not None and
    # sum(extend_seq_lens_cpu) == num_tokens` (:1221-1226), which the prefill call's
    # `need_compress=not is_draft`, `num_tokens=sum(extend_seq_lens_cpu)` (:2221-2236) and
    # attach_decode_streams' default False (:1174) make true on a target prefill
    "0.5.23": {"draft-extend": 0, "target-extend": 0},
}


@pytest.mark.parametrize("version", sorted(EXPECTED))
def test_real_builder_counts_per_path(release, version):
    t = release(version)
    for path, want in EXPECTED[version].items():
        m = h.measure(t, path, "cpu")
        assert m.executed, m.error
        assert m.syncs == want, (path, m.sites)
        assert all("deepseek_v4_backend_hip_radix.py" in s and h.ATTACH in s for s in m.sites)


def test_loaded_code_is_the_release_code(release):
    t = release("0.5.17")
    fn = h.dsv4_class(t).__dict__[h.ATTACH]
    assert fn.__code__.co_filename == str(t.file(h.DSV4_FILE))
    src = t.source(h.DSV4_FILE).splitlines()
    assert f"def {h.ATTACH}(" in src[fn.__code__.co_firstlineno - 1]


def test_outputs_are_the_metadata_the_builder_computes(release):
    import torch

    t = release("0.5.17")
    cls = h.dsv4_class(t)
    inp = h.make_inputs(cls.__dict__[h.ATTACH], "target-extend", 8, seed=3)
    out = h.call(cls, inp)
    ext = inp.locals_["extend_seq_lens_cpu"]
    rpi = inp.kwargs["req_pool_indices"]
    want = torch.repeat_interleave(rpi.to(torch.int64), torch.tensor(ext))
    assert torch.equal(out["pf_state_slot"], want)
    assert out["pf_cu_q"].numel() == sum(ext)


def test_a_builder_that_cannot_load_is_not_executed_with_why(release, tmp_path):
    t = release("0.5.17")
    root = tmp_path / "edited"
    shutil.copytree(t.root / "sglang" / "srt" / "layers" / "attention",
                    root / "sglang" / "srt" / "layers" / "attention")
    f = root / "sglang" / h.DSV4_FILE
    f.write_text(f.read_text().replace(f"def {h.ATTACH}(", "def _renamed_builder("))
    from diag.target import Target

    m = h.measure(Target(root, "0.5.17-edited", "path"), "draft-extend")
    assert not m.executed and "has no _attach_unified_kv_prefill_meta" in m.error
    missing = h.measure(Target(tmp_path / "none", "0", "path"), "draft-extend")
    assert not missing.executed and "not in this release" in missing.error


def test_unknown_sglang_import_is_reported_not_raised():
    with pytest.raises(ImportError, match="no stand-in for sglang.srt.other"):
        h._import("sglang.srt.other", fromlist=("x",))


def test_time_limit():
    t0 = time.perf_counter()
    with pytest.raises(h.HarnessError, match="did not finish within 0.2 s"):
        h.run_limited(lambda: time.sleep(3), 0.2)
    assert time.perf_counter() - t0 < 2
