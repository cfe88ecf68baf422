# Sourced by the learning scripts: train_modes OUT_DIR NAME SUFFIX ARG... trains ARG... once in each
# mode, sync GRPO (run.mode=sync, prox=behav, loss=ppo) and async A-3PO (the defaults), as the runs
# OUT_DIR/NAME-sync SUFFIX and OUT_DIR/NAME-async SUFFIX, each logged to OUT_DIR/<run>.log; a run
# whose summary.json exists is skipped.
train_modes() {
  local out=$1 name=$2 suffix=$3 mode run
  shift 3
  local extra
  mkdir -p "$out"
  for mode in sync async; do
    case $mode in
      sync) extra=(run.mode=sync trainer.prox=behav loss.name=ppo) ;;
      async) extra=(run.mode=async) ;;
    esac
    run="$name-$mode$suffix"
    [ -f "$out/$run/summary.json" ] && continue
    echo "== $run" >&2
    asyncrl train "$@" "${extra[@]}" run.out_dir="$out" run.name="$run" run.progress=false \
      "run.report_to=[]" > "$out/$run.log" 2>&1
  done
}
