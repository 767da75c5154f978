"""Layers whose output size depends on the values they read (runtime/output_bound.*): detection heads
emit as many rows as survive their thresholds and NMS, so the size prepare saw is one sample. The
runtime plans each at the most rows its params and input shapes allow, and a run on any other input
equals stock NCNN within the budget. Also: a layer reading such an output, and a value-dependent layer
without a bound, are refused at prepare with one line; an input of another size than prepared is
refused by the native executor itself. A two-stage detector's Proposal (its rois as many as survive
NMS, on the C heap) runs when its rois leave the model or a ROI layer, which pools the first, reads
them, directly or through Splits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flexnn_ncnn import Session, planning
from flexnn_ncnn.cli import UserError
from flexnn_ncnn.ncnn_model import read_param
from flexnn_ncnn.ncnn_model.random_weights import random_modelbin
from flexnn_ncnn.ncnn_model.stock import run_stock
from flexnn_ncnn.planning import ARENA_MARGIN
from flexnn_ncnn.prepare import prepare_model, write_plan_file
from helpers import assert_close, assert_counted_within_budget, assert_same_detections

SHAPE = (3, 48, 48)
BACKBONE = """Input data 0 1 data 0=48 1=48 2=3
Split splitd 1 2 data data_a data_b
Convolution conv1 1 1 data_a c1 0=16 1=3 3=2 4=1 5=1 6=432 9=1
Split split1 1 3 c1 c1a c1b c1c
"""
# one SSD scale (24x24 cells, 2 priors each, 5 classes): loc/conf convolutions, NCNN's Permute /
# Flatten / Reshape / Softmax wiring, PriorBox, then DetectionOutput capped at 50 rows
SSD = BACKBONE + """Convolution loc 1 1 c1a loc 0=8 1=1 5=1 6=128
Permute loc_perm 1 1 loc loc_perm 0=3
Flatten loc_flat 1 1 loc_perm loc_flat
Convolution conf 1 1 c1b conf 0=10 1=1 5=1 6=160
Permute conf_perm 1 1 conf conf_perm 0=3
Flatten conf_flat 1 1 conf_perm conf_flat
Reshape conf_reshape 1 1 conf_flat conf_reshape 0=5 1=-1
Softmax conf_softmax 1 1 conf_reshape conf_softmax 0=1 1=1
Flatten conf_flatten 1 1 conf_softmax conf_flatten
PriorBox priorbox 2 1 c1c data_b priorbox -23300=1,1.000000e+01 -23301=1,2.000000e+01 9=-233 10=-233 13=5.000000e-01
DetectionOutput detection_out 3 1 loc_flat conf_flatten priorbox output 0=5 1=4.500000e-01 2=60 3=50 4=7.000000e-01
"""
# YOLOv3: two scales (24x24 and 12x12), 3 anchors each, 2 classes
YOLOV3 = BACKBONE + """Convolution head1 1 1 c1a h1 0=21 1=1 5=1 6=336
Pooling pool 1 1 c1b p1 0=0 1=2 2=2
Convolution head2 1 1 p1 h2 0=21 1=1 5=1 6=336
Yolov3DetectionOutput detection_out 2 1 h1 h2 output 0=2 1=3 2=3.000000e-01 3=4.500000e-01 -23304=12,1.000000e+01,1.400000e+01,2.300000e+01,2.700000e+01,3.700000e+01,5.800000e+01,8.100000e+01,8.200000e+01,1.350000e+02,1.690000e+02,3.440000e+02,3.190000e+02 -23305=6,3.000000e+00,4.000000e+00,5.000000e+00,0.000000e+00,1.000000e+00,2.000000e+00 -23306=2,2.000000e+00,4.000000e+00
"""
# YOLOv2 region layer: 24x24 cells, 5 anchors, 2 classes
YOLOV2 = BACKBONE + """Convolution head 1 1 c1a h 0=35 1=1 5=1 6=560
YoloDetectionOutput detection_out 1 1 h output 0=2 1=5 2=3.000000e-01 3=4.500000e-01 -23304=10,1.080000e+00,1.190000e+00,3.420000e+00,4.410000e+00,6.630000e+00,1.138000e+01,9.420000e+00,5.110000e+00,1.662000e+01,1.052000e+01
"""
DETECTORS = {"ssd": SSD, "yolov3": YOLOV3, "yolov2": YOLOV2}

def write_model(folder: Path, name: str, layers: str) -> tuple[Path, Path]:
    """The layers (one per line, the backbone's unused tops dropped) as NCNN files with seeded weights."""
    lines = [l for l in layers.splitlines() if l.strip()]
    blobs = {b for l in lines for b in l.split()[4:4 + sum(map(int, l.split()[2:4]))]}
    param, bin_ = folder / f"{name}.param", folder / f"{name}.bin"
    param.write_text(f"7767517\n{len(lines)} {len(blobs)}\n" + "\n".join(lines) + "\n")
    with open(bin_, "wb") as f:
        random_modelbin(read_param(param), seed=11).write(f)
    return param, bin_


def seeded_input(seed: int) -> np.ndarray:
    """Inputs at three scales, so the number of detections varies from one to the next."""
    return (np.random.default_rng(seed).standard_normal(SHAPE) * (1 + seed % 3)).astype(np.float32)


def planned_session(folder: Path, name: str, layers: str) -> tuple[Path, Path, Session, tuple[int, int]]:
    """The model written with seeded weights, prepared on this machine, and a Session on its plan;
    the budgets to run it at: the plan's generous one and the tightest it plans within."""
    param, bin_ = write_model(folder, name, layers)
    content = prepare_model(param, bin_, 1 << 34, {"data": SHAPE})
    path = folder / f"{name}.flexnn.plan.json"
    write_plan_file(content, path)
    tightest = planning.min_feasible_budget(content.profile) + ARENA_MARGIN + content.reserved_bytes
    return param, bin_, Session(path), (content.plan.budget, tightest)


def stock_detections(param: Path, bin_: Path, x: np.ndarray) -> np.ndarray:
    return run_stock(param, bin_, {"data": x}, ["output"], fp32=False)["output"]


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_detections_equal_stock_on_inputs_prepare_never_saw(name: str, tmp_path: Path) -> None:
    param, bin_, session, budgets = planned_session(tmp_path, name, DETECTORS[name])
    # prepare profiles on its own seeded input: standard normal from seed 0
    prepared_rows = len(stock_detections(param, bin_, np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)))
    rows = []
    for budget in budgets:
        session.set_budget(budget)
        for seed in range(1, 21):
            x = seeded_input(seed)
            ref = stock_detections(param, bin_, x)
            assert_same_detections(session.run({"data": x})["output"], ref)
            rows.append(len(ref))
        assert_counted_within_budget(session.stats())
    # the inputs reach beyond what prepare saw, which a plan of the seen size could not hold
    assert max(rows) > prepared_rows and len(set(rows)) > 3, (prepared_rows, sorted(set(rows)))


def test_a_layer_reading_detections_is_refused_at_prepare(tmp_path: Path) -> None:
    param, bin_ = write_model(tmp_path, "reads", YOLOV2.replace(" output 0=2", " dets 0=2")
                              + "Sigmoid post 1 1 dets output\n")
    with pytest.raises(UserError, match="layer post reads dets, whose size depends on the detections of detection_out"):
        prepare_model(param, bin_, 1 << 34, {"data": SHAPE})


def test_a_value_dependent_layer_without_a_bound_is_refused_at_prepare(tmp_path: Path) -> None:
    layers = SSD.replace("3=50 ", "3=-1 ")  # keep_top_k -1: NCNN's own code has no cap for it
    param, bin_ = write_model(tmp_path, "unbounded", layers)
    with pytest.raises(UserError, match="negative nms_top_k .* or keep_top_k .* has no output bound"):
        prepare_model(param, bin_, 1 << 34, {"data": SHAPE})


def test_the_executor_refuses_an_input_of_another_size(tmp_path: Path) -> None:
    """Below Session's own checks: the native runtime compares the input's bytes with the plan's, so
    no caller can have NCNN read past the input inside the arena."""
    param, bin_ = write_model(tmp_path, "yolov2", YOLOV2)
    path = tmp_path / "yolov2.flexnn.plan.json"
    write_plan_file(prepare_model(param, bin_, 1 << 34, {"data": SHAPE}), path)
    executor = Session(path)._executor
    small = np.zeros((3, 48, 40), np.float32)
    with pytest.raises(RuntimeError, match=r"input 'data' \(w=40 h=48 c=3\) takes .* B, the model was prepared with"):
        executor.run({"data": small})


# a region proposal network over a 24x24 feature (9 anchors a cell), its rois (4 floats each, as many
# as survive NMS) from an image size given as a second, 1-D input (-233: a size left open, as
# NCNN's Caffe converter writes it)
RPN = """Input data 0 1 data 0=48 1=48 2=3
Input im_info 0 1 im_info 0=3 1=-233 2=-233
Convolution conv1 1 1 data c1 0=16 1=3 3=2 4=1 5=1 6=432 9=1
{split}Convolution rpn 1 1 {rpn_in} r 0=16 1=3 4=1 5=1 6=2304 9=1
Split split2 1 2 r ra rb
Convolution rpn_cls 1 1 ra cls_score 0=18 1=1 5=1 6=288
Convolution rpn_bbox 1 1 rb bbox 0=36 1=1 5=1 6=576
Reshape cls_reshape 1 1 cls_score cls_r 0=0 1=-1 2=2
Softmax cls_softmax 1 1 cls_r cls_prob
Reshape prob_reshape 1 1 cls_prob cls_prob_r 0=0 1=-1 2=18
Proposal proposal 3 1 cls_prob_r bbox im_info {rois} 0=2 1=4 3=300 5=2
"""
ROIS = RPN.format(split="", rpn_in="c1", rois="output")
# Faster R-CNN's second stage on the first roi: ROIPooling, a classifier
TWO_STAGE = RPN.format(split="Split split1 1 2 c1 c1a c1b\n", rpn_in="c1a", rois="rois") + """ROIPooling roi_pool 2 1 c1b rois pooled 0=4 1=4 2=5.000000e-01
InnerProduct fc 1 1 pooled fc 0=10 1=1 2=2560
Softmax prob 1 1 fc output
"""


def two_stage_inputs(seed: int) -> dict[str, np.ndarray]:
    x = seeded_input(seed)
    return {"data": x, "im_info": np.array([48, 48, 1 + seed % 2], np.float32)}


# R-FCN's wiring: the rois through a Split to two ROI layers, whose outputs the classifier joins
SPLIT_ROIS = TWO_STAGE.replace("rois 0=2", "rois_all 0=2").replace(
    "ROIPooling roi_pool 2 1 c1b rois pooled", "Split split_c1b 1 2 c1b c1b_a c1b_b\nSplit split_rois 1 2 rois_all rois rois_b\n"
    "ROIAlign roi_align 2 1 c1b_b rois_b aligned 0=4 1=4 2=5.000000e-01\nROIPooling roi_pool 2 1 c1b_a rois pooled_a").replace(
    "InnerProduct fc 1 1 pooled fc", "Concat join 2 1 pooled_a aligned pooled\nInnerProduct fc 1 1 pooled fc").replace(
    "0=10 1=1 2=2560", "0=10 1=1 2=5120")
TWO_STAGE_MODELS = {"rois": (ROIS, "output"), "two_stage": (TWO_STAGE, "rois"), "split_rois": (SPLIT_ROIS, "rois_all")}


@pytest.mark.parametrize("name", sorted(TWO_STAGE_MODELS))
def test_proposals_equal_stock_on_inputs_prepare_never_saw(name: str, tmp_path: Path) -> None:
    layers, rois_blob = TWO_STAGE_MODELS[name]
    param, bin_, session, budgets = planned_session(tmp_path, name, layers)
    rois = []
    for budget in budgets:
        session.set_budget(budget)
        for seed in range(1, 21):
            feeds = two_stage_inputs(seed)
            ref = run_stock(param, bin_, feeds, sorted({"output", rois_blob}), fp32=False)
            got = session.run(feeds)["output"]
            assert_close(got, ref["output"], 1e-4)
            rois.append(len(ref[rois_blob]))
        assert_counted_within_budget(session.stats())
    # the number of rois varies with the input, no size of it planned; some counts are ones NCNN would
    # pack a Split's input by (4, 8, 16 channels a pack)
    assert len(set(rois)) > 3 and any(n % 4 == 0 for n in rois), sorted(set(rois))


def test_rois_read_by_another_layer_are_refused_at_prepare(tmp_path: Path) -> None:
    layers = TWO_STAGE.replace("rois 0=2", "rois_all 0=2").replace(
        "ROIPooling", "Split split_rois 1 2 rois_all rois rois_b\nSigmoid post 1 1 rois_b post\nROIPooling")
    param, bin_ = write_model(tmp_path, "reads_rois", layers)
    with pytest.raises(UserError, match="layer post reads rois_all, whose size depends on the detections of proposal "
                                        r"\(Proposal\).* or ROI layers read them"):
        prepare_model(param, bin_, 1 << 34, {"data": SHAPE})


def test_an_image_size_drawn_first_still_gives_proposals(tmp_path: Path) -> None:
    """Prepare, shape inference and the uncounted-memory child draw seeded inputs in the model's input
    order; drawn at random, the image size Proposal clips to and scales its minimum box by leaves no box
    (seed 0's first three values: NCNN's Proposal then fails), so it gets the image's height and width."""
    lines = TWO_STAGE.splitlines()
    image_size = next(line for line in lines if line.startswith("Input im_info"))
    param, bin_, session, budgets = planned_session(tmp_path, "size_first", "\n".join([image_size, *(
        line for line in lines if line != image_size)]) + "\n")
    assert list(session.input_shapes) == ["im_info", "data"]
    session.set_budget(budgets[1])
    for seed in range(1, 4):
        feeds = two_stage_inputs(seed)
        ref = run_stock(param, bin_, feeds, ["output"], fp32=False)["output"]
        assert_close(session.run(feeds)["output"], ref, 1e-4)
