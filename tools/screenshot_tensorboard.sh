#!/usr/bin/env bash
# Retakes docs/guides/watch-tensorboard.png: TensorBoard showing two PPO CartPole runs (seeds 0 and 1)
# while they train, from the event files their live sink writes (--tensorboard), so the picture is
# of what a user watching a job sees, not of an export after the fact.
#
#   tools/screenshot_tensorboard.sh [OUT.png]      # from the repository root, the venv active
#
# Needs the export and test extras (tensorboardX writes, tensorboard serves), Debian's chromium
# (apt-get install chromium) and Pillow (matplotlib's). WAIT_SECONDS (default 45): how long the runs
# train before the picture; PORT (default 6006): TensorBoard's port.
set -euo pipefail

out=${1:-docs/guides/watch-tensorboard.png}
port=${PORT:-6006}
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

for seed in 0 1; do
    # no target return: the runs are still going when the picture is taken
    setsid lamarckian-hpc train configs/ppo_cartpole.yaml --tensorboard "$work/tb" seed=$seed \
        storage.directory="$work/runs" storage.run_name=ppo-cartpole-s$seed \
        storage.metrics_interval_seconds=2 stop.target_return=null >"$work/train-s$seed.log" 2>&1 &
    pids+=($!)
done
# from the folder above, so that the page names the log folder `tb`, not the temporary path
(cd "$work" && exec setsid tensorboard --logdir tb --port "$port" --reload_interval 5 >tensorboard.log 2>&1) &
pids+=($!)

sleep "${WAIT_SECONDS:-45}"
for pid in "${pids[@]}"; do
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "error: a run or TensorBoard stopped before the picture; logs:" >&2
        tail -n 5 "$work"/*.log >&2
        exit 1
    fi
done

# The Scalars dashboard, filtered to four series: it draws every matching chart without scrolling.
tags='^(episode_return_mean|env_frames_per_second|entropy|loss_value)$'
url="http://localhost:$port/#scalars&tagFilter=$(python -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$tags")"
chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,900 \
    --virtual-time-budget=20000 --screenshot="$work/shot.png" "$url" 2>/dev/null

# Keep the page light: the header, the run list and the four charts, as a palette PNG.
python - "$work/shot.png" "$out" <<'EOF'
import sys
from PIL import Image

shot = Image.open(sys.argv[1]).convert("RGB")
# the runs' curves are the only saturated colour in the charts' area: none means a page still loading
_, saturation, _ = shot.crop((370, 230, 1060, 720)).convert("HSV").split()
curve_pixels = sum(saturation.point(lambda s: 255 if s > 100 else 0).histogram()[255:])
if curve_pixels < 2000:
    sys.exit(f"error: no curves in the picture ({curve_pixels} coloured pixels); try a longer WAIT_SECONDS")
shot.crop((0, 0, 1400, 760)).quantize(colors=128).save(sys.argv[2], optimize=True)
print(f"{sys.argv[2]}: {Image.open(sys.argv[2]).size}")
EOF
