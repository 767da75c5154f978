#!/usr/bin/env bash
# Measures the hot list the host build lays out first (flexnn_ncnn/hot_code/x86.txt; docs/RUNTIME.md,
# "Where the code lies"): NCNN's benchmark structures (random weights) and four zoo models are sliced
# and prepared in WORK (default build/hot-code), each plan runs once on the code tracer's module
# (every function on pages of its own, so the trace names exactly the functions that ran), and the
# host build is laid out with the list. The functions the list held and this machine did not run stay
# after the traced ones (code_trace --merge): run on hosts of each instruction set (AVX2, AVX-512), the
# list covers the functions their compilers cloned under different names. Needs the test extras
# (torch, pnnx) and ../shared/models/ncnn-benchmark. After a change of NCNN's pin, start from an empty list.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
WORK=${1:-build/hot-code}
STRUCTURES="mobilenet_ssd squeezenet_int8 yolo-fastestv2 shufflenet_v2 efficientnet_b0 blazeface googlenet resnet18
            mobilenet_ssd_int8 mobilenet_v2 alexnet resnet50 squeezenet_ssd googlenet_int8 mobilenet mnasnet
            proxylessnasnet squeezenet shufflenet"
# name and budget: each structure at 16 MB (or its smallest budget where 16 MB does not fit) and at its
# smallest (spatial tiles: Crop, Concat, Padding), ResNet-152 at its smallest (a spatially tiled stem),
# VGG-19 at 16 MB (tiled too), the project's YOLO and UNet structures (detection heads, Interp,
# Deconvolution), and the transformers near and at their smallest budgets (Gemm, attention, LayerNorm,
# split MLPs); a third field is the models' --input-shape where the structure declares none
PLANS="$(for s in $STRUCTURES; do printf 'bench:%s 16MB\nbench:%s min\n' "$s" "$s"; done
         printf 'mobilenetv2 16MB\nsqueezenet 16MB\nresnet152 min\nvgg19 16MB\nstruct:yolov3_tiny 16MB\nstruct:unet 16MB\n'
         printf 'gpt2 10MB\ngpt2 min\nvit_b16 45MB\nbench:vision_transformer min 1,3,384,384\n')"

"$PYTHON" -m flexnn_ncnn.build --target host --code-trace
mkdir -p "$WORK/models"
while read -r name budget model_shape; do
    stem=${name/:/-}
    [ -f "$WORK/models/$stem.json" ] || "$PYTHON" -m flexnn_ncnn.models "$name" -o "$WORK/models" \
        ${model_shape:+--input-shape "$model_shape"}
    [ -f "$WORK/$stem-$budget/$stem.flexnn.plan.json" ] && continue
    shape=$("$PYTHON" -c 'import json, sys; print(",".join(map(str, [1, *json.load(open(sys.argv[1]))["inputs"][0]["shape"]])))' \
            "$WORK/models/$stem.json")
    args=("$WORK/models/$stem.param" --bin "$WORK/models/$stem.bin" --input-shape "$shape" --threads 2 -o "$WORK/$stem-$budget")
    "$PYTHON" -m flexnn_ncnn.slice "${args[@]}" --budget "$budget" || "$PYTHON" -m flexnn_ncnn.slice "${args[@]}" --budget min
done <<< "$PLANS"
"$PYTHON" -m flexnn_ncnn.code_trace "$WORK"/*-*/*.flexnn.plan.json -o flexnn_ncnn/hot_code/x86.txt --merge flexnn_ncnn/hot_code/x86.txt
"$PYTHON" -m flexnn_ncnn.build --target host
