#!/bin/bash
# The planner's predictions with the backward counted on fake tensors against a tree that counts it on real ones:
# every timeline model (at two widths for CD-GCN), both tasks, every strategy the planner prices (plan's default
# set), P = 2 and 8; the --json output and the printed table must be identical.
#   perf/results/planner/counting-check.sh BEFORE_TREE DATA OUT      (DATA: a prepared snapshot dataset)
set -u
before=$1 data=$2 out=$3
py=$(cd "$(dirname "$0")/../../.." && pwd)/.venv/bin/python
after=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$out"
fail=0
for spec in cdgcn:16:link_prediction cdgcn:256:node_classification dcrnn:8:link_prediction dysat:8:link_prediction \
            evolvegcn_h:8:node_classification evolvegcn_o:8:link_prediction gconv_gru:8:link_prediction \
            gconv_lstm:8:node_classification gcrn_m1:8:link_prediction mpnn_lstm:8:link_prediction \
            tgcn:8:node_classification tgcn_cell:8:link_prediction tmgcn:8:link_prediction; do
  IFS=: read -r model hidden task <<< "$spec"
  for tree in before after; do
    dir=$before; [ $tree = after ] && dir=$after
    for fmt in json table; do
      flag=--json; [ $fmt = table ] && flag=
      (cd "$dir" && "$py" -m hpcdgnn plan jobs/quickstart.yaml --ranks 2 8 $flag --set data.path="$data" \
        model.name=$model model.hidden=$hidden task.name=$task > "$out/$spec.$tree.$fmt" 2>&1)
    done
  done
  for fmt in json table; do
    if cmp -s "$out/$spec.before.$fmt" "$out/$spec.after.$fmt"; then echo "same      $spec $fmt"
    else echo "DIFFERENT $spec $fmt"; fail=1; fi
  done
done
exit $fail
