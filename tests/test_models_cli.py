"""`python -m flexnn_ncnn.models`: the added zoo architectures are faithful (parameter counts of the
reference implementations), exports are seeded and compute what the torch model computes, and
bench:NAME gets seeded random weights. Only tiny instances are exported here."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flexnn_ncnn.ncnn_model.stock import run_stock
from helpers import assert_user_error, run_module

torch = pytest.importorskip("torch")

from flexnn_ncnn.models import _zoo  # noqa: E402
from flexnn_ncnn.zoo.models import gpt2, mobilenet_v2, squeezenet  # noqa: E402

# a three-layer structure in NCNN's benchmark style (shape hint on the Input)
BENCH_PARAM = """7767517
4 4
Input                    data                     0 1 data -23330=4,3,16,16,3 0=16 1=16 2=3
Convolution              conv1                    1 1 data conv1 0=8 1=3 4=1 5=1 6=216 9=1
Pooling                  pool1                    1 1 conv1 pool1 0=1 4=1
InnerProduct             fc                       1 1 pool1 output 0=10 1=1 2=80
"""


@pytest.mark.parametrize("make, params", [
    (mobilenet_v2, 3_504_872),                    # torchvision mobilenet_v2
    (lambda: squeezenet("1_0"), 1_248_424),       # torchvision squeezenet1_0
    (lambda: squeezenet("1_1"), 1_235_496),       # torchvision squeezenet1_1
    (gpt2, 124_439_808),                          # GPT-2 small: wte (tied LM head) + wpe + 12 blocks + ln_f
])
def test_added_architectures_match_reference_parameter_counts(make, params):
    with torch.device("meta"):
        model = make()
    assert sum(p.numel() for p in model.parameters()) == params


def test_tiny_exports_are_seeded_and_compute_what_torch_computes(tmp_path):
    names = ("gpt2", "mobilenetv2", "squeezenet")
    proc = run_module("models", *names, "--tiny", "-o", str(tmp_path), "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    for name in names:
        d = json.loads((tmp_path / f"{name}.json").read_text())
        assert d["storage"] == "fp32" and d["seed"] == 3 and d["tiny"] and len(d["inputs"]) == 1
        spec = _zoo()[name]
        assert d["inputs"][0]["shape"] == list(spec.tiny_input_shape[1:])
        torch.manual_seed(3)  # the same weights as the export
        model = spec.make_tiny().eval()
        x = torch.randn(*spec.tiny_input_shape)
        with torch.no_grad():
            ref = model(x).numpy().reshape(-1)
        got = run_stock(tmp_path / d["param"], tmp_path / d["bin"], {d["inputs"][0]["name"]: x[0].numpy()}, d["outputs"])
        out = got[d["outputs"][0]].reshape(-1)
        assert np.abs(out - ref).max() <= 1e-4 * np.abs(ref).max(), name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_benchmark_structures_get_seeded_random_weights(tmp_path):
    bench = tmp_path / "benchmark"
    bench.mkdir()
    (bench / "tiny.param").write_text(BENCH_PARAM)
    outputs = []
    for out, seed in (("a", "1"), ("b", "1"), ("c", "2")):
        proc = run_module("models", "bench:tiny", "-o", str(tmp_path / out), "--seed", seed, "--benchmark-dir", str(bench))
        assert proc.returncode == 0, proc.stderr
        outputs.append((tmp_path / out / "bench-tiny.bin").read_bytes())
    assert outputs[0] == outputs[1] != outputs[2]
    d = json.loads((tmp_path / "a" / "bench-tiny.json").read_text())
    assert d["inputs"] == [{"name": "data", "shape": [3, 16, 16]}] and d["outputs"] == ["output"]
    assert d["bin_bytes"] == len(outputs[0]) and (tmp_path / "a" / "bench-tiny.param").read_text() == BENCH_PARAM
    listing = run_module("models", "--list", "--benchmark-dir", str(bench))
    assert "bench:tiny" in listing.stdout and "gpt2" in listing.stdout


def test_a_benchmark_structure_without_a_declared_shape_takes_the_one_given(tmp_path):
    """NCNN's vision_transformer declares no input shape: generating it without one is refused naming
    the flag, with --input-shape it is written at that shape and runs in stock NCNN, and the bench's
    cached copy is re-generated when a run asks for another shape."""
    from flexnn_ncnn.bench.__main__ import model_description

    bench = tmp_path / "benchmark"
    bench.mkdir()
    (bench / "tiny.param").write_text(BENCH_PARAM.replace(" -23330=4,3,16,16,3 0=16 1=16 2=3", ""))
    out = tmp_path / "out"
    assert_user_error(run_module("models", "bench:tiny", "-o", str(out), "--benchmark-dir", str(bench)),
                      "bench:tiny", "--input-shape data=")
    assert not out.exists() or not list(out.iterdir())
    proc = run_module("models", "bench:tiny", "-o", str(out), "--benchmark-dir", str(bench), "--input-shape", "1,3,20,24")
    assert proc.returncode == 0, proc.stderr
    d = json.loads((out / "bench-tiny.json").read_text())
    assert d["inputs"] == [{"name": "data", "shape": [3, 20, 24]}]
    x = np.random.default_rng(0).standard_normal((3, 20, 24)).astype(np.float32)
    assert run_stock(out / "bench-tiny.param", out / "bench-tiny.bin", {"data": x}, ["output"])["output"].size == 10
    assert model_description("bench:tiny", out, 0, False, bench, ["data=1,3,20,24"])["inputs"][0]["shape"] == [3, 20, 24]
    assert model_description("bench:tiny", out, 0, False, bench, ["1,3,8,8"])["inputs"][0]["shape"] == [3, 8, 8]
    assert json.loads((out / "bench-tiny.json").read_text())["inputs"][0]["shape"] == [3, 8, 8]
    assert_user_error(run_module("models", "squeezenet", "--tiny", "-o", str(out), "--input-shape", "1,3,8,8"),
                      "--input-shape applies to bench:NAME structures only")
    assert_user_error(run_module("models", "bench:tiny", "-o", str(out), "--benchmark-dir", str(bench),
                                 "--input-shape", "image=1,3,8,8"), "no input 'image'")


def test_an_output_softmax_over_one_element_is_made_to_normalise_the_scores(tmp_path):
    """NCNN's vision_transformer ends in a Softmax over the one row of its 1x1000 scores: every output is
    1, whatever was computed. Its copy normalises the 1000 scores, so its output checks them."""
    bench = tmp_path / "benchmark"
    bench.mkdir()
    (bench / "vt.param").write_text("7767517\n3 3\nInput in 0 1 x 0=16 1=1\n"
                                    "Gemm fc 1 1 x s 3=1 5=1 6=1 7=1 8=10 9=16 10=4\nSoftmax prob 1 1 s y 0=0 1=1\n")
    proc = run_module("models", "bench:vt", "-o", str(tmp_path / "out"), "--benchmark-dir", str(bench))
    assert proc.returncode == 0, proc.stderr
    d = json.loads((tmp_path / "out" / "bench-vt.json").read_text())
    assert "Softmax over its last axis" in d["description"]
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    outputs = {p.name: run_stock(p, tmp_path / "out" / "bench-vt.bin", {"x": x}, ["y"])["y"]
               for p in (bench / "vt.param", tmp_path / "out" / "bench-vt.param")}
    assert np.allclose(outputs["vt.param"], 1)
    assert outputs["bench-vt.param"].shape == (1, 10) and abs(outputs["bench-vt.param"].sum() - 1) < 1e-5
    assert len(np.unique(outputs["bench-vt.param"])) == 10


def test_a_benchmark_detector_keeps_every_box_so_its_outputs_hold_rows(tmp_path):
    """A benchmark SSD whose head keeps only what scores above a threshold random weights never reach
    (NCNN's keep 0.25 of 21 classes) would return no rows: its copy keeps every box, and stock NCNN
    returns rows on it where the original returns none."""
    from flexnn_ncnn.ncnn_model import read_param
    from flexnn_ncnn.ncnn_model.structures import STRUCTURES

    bench = tmp_path / "benchmark"
    bench.mkdir()
    param = STRUCTURES["mobilenet_ssd"].build()
    head = next(layer for layer in param if layer.type == "DetectionOutput")
    head.params.set(4, 0.99)
    (bench / "ssd.param").write_text(param.format())
    proc = run_module("models", "bench:ssd", "-o", str(tmp_path / "out"), "--benchmark-dir", str(bench))
    assert proc.returncode == 0, proc.stderr
    d = json.loads((tmp_path / "out" / "bench-ssd.json").read_text())
    assert d["description"].endswith("its detection head keeping every box")
    written = tmp_path / "out" / "bench-ssd.param"
    assert next(l for l in read_param(written) if l.type == "DetectionOutput").params.get(4, 0.5) == 0
    x = np.random.default_rng(1).standard_normal(d["inputs"][0]["shape"]).astype(np.float32)
    rows = {p.name: len(run_stock(p, tmp_path / "out" / "bench-ssd.bin", {"data": x}, ["output"])["output"])
            for p in (bench / "ssd.param", written)}
    assert rows["ssd.param"] == 0 and rows["bench-ssd.param"] > 0, rows


def test_unknown_models_are_user_errors(tmp_path):
    assert_user_error(run_module("models", "resnet9", "-o", str(tmp_path)), "unknown model 'resnet9'")
    assert_user_error(run_module("models", "bench:nope", "-o", str(tmp_path), "--benchmark-dir", str(tmp_path)),
                      "bench:nope", "no nope.param")
    assert_user_error(run_module("models"), "give model NAME(s)")
