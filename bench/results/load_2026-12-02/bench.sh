#!/bin/bash
# Interleaved rounds: before (HEAD 5aabb70, no uvloop/httptools importable), after (c128fc3), after on asyncio+h11.
PY=/work/main/.venv/bin/python
for r in d; do
  for v in before after after_h11; do
    echo "== $r $v $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    case $v in
      before) (cd /tmp/load_before && PYTHONPATH=/tmp/load_noext:/tmp/load_before $PY bench/load.py --out /tmp/load_res --name load_before_$r.json > /tmp/load_res/$v_$r.log 2>&1);;
      after) (cd /tmp/load_after && PYTHONPATH=/tmp/load_after $PY bench/load.py --out /tmp/load_res --name load_after_$r.json > /tmp/load_res/after_$r.log 2>&1);;
      after_h11) (cd /tmp/load_after && PYTHONPATH=/tmp/load_after $PY bench/load.py --service-env SPILLWAY_SERVER_LOOP=asyncio --service-env SPILLWAY_SERVER_HTTP=h11 --out /tmp/load_res --name load_after_h11_$r.json > /tmp/load_res/after_h11_$r.log 2>&1);;
    esac
    echo "   rc=$?"
  done
done
echo done $(date -u +%H:%M:%S)
