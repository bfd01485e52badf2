# Shared by scripts/gpu-session and scripts/gpu-submit: one stage of a device call.
#
#   stage NAME LIMIT_S CMD...
#
# Runs CMD under a time limit (cut to what is left before DEADLINE seconds after t0), logs it to
# $LOGS/NAME.log, appends one verdict line (and the stage's own summary block, if it printed one)
# to $DEST/summary.txt, sets FAILED=1 on failure, and re-packs $DEST/logs.tgz so a call cut short
# still returns what it finished. A stage that does not fit before the deadline is listed as not run.
stage() {
  local name=$1 limit=$2
  shift 2
  local left=$(( DEADLINE - ($(date +%s) - t0) ))
  if (( left < 20 )); then
    echo "$name: NOT RUN (session deadline)" | tee -a "$DEST/summary.txt"
    return
  fi
  (( limit > left )) && limit=$left
  local t=$(date +%s)
  timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  local verdict=ok
  [[ $rc -eq 124 ]] && verdict="TIMEOUT after ${limit}s"
  [[ $rc -ne 0 && $rc -ne 124 ]] && verdict="FAILED rc=$rc"
  [[ $rc -ne 0 ]] && FAILED=1
  echo "$name: $verdict ($(( $(date +%s) - t ))s)" | tee -a "$DEST/summary.txt"
  # The stage's own summary lines, if it printed any.
  sed -n '/summary =====/,$p;/^gpu-reliability summary/,$p;/^==== cp-check summary/,$p' "$LOGS/$name.log" |
    sed 's/^/    /' >>"$DEST/summary.txt"
  tar czf "$DEST/logs.tgz" -C "$LOGS" . 2>/dev/null
}
