#!/usr/bin/env bash
# The mutation check of the feed-forward functions: their tests must catch
# each of the mutants in tests/hardening/mutants/ (one sed script per mutant;
# its first line "# target: FILE" names the .cpp file of the library it
# mutates, every other non-comment line is one sed command that must change
# that file).
#
# It reuses a configured and built CMake build directory (Makefile generator)
# instead of building a copy of the library: every mutant must still apply,
# each command on its own, before anything is built (a mutant whose target is
# gone, or one of whose commands changes nothing because its pattern no longer
# matches after a refactor, stops the run within seconds with a message naming
# the mutant, the target and the line to update). Then, for each mutant, in a
# work directory of its own: copy the target and apply the mutant; compile the
# copy with the target's exact command from compile_commands.json; swap the
# object into a copy of libxtgrad.a (ar); relink the test executables below
# with their link.txt against that copy; run them and require that at least
# one fails. The same steps without a mutant ("unmutated") must give tests
# that all pass, or the check means nothing. A mutant that does not compile is
# a failure of this script too. Nothing in the build directory or the source
# tree is changed. Mutants run XTGRAD_MUTANTS_JOBS at a time.
#
#   tests/hardening/mutants.sh [--build DIR] [MUTANT...]
#     DIR     the build directory (default build/release of this source tree);
#             the test executables are brought up to date there first
#     MUTANT  a file name in tests/hardening/mutants/, with or without .sed;
#             default: all of them
# Environment:
#   XTGRAD_MUTANTS_DIR      work directory (default DIR/mutants; wiped at start)
#   XTGRAD_MUTANTS_KEEP=1   keep the work directory (logs, diffs) afterwards
#   XTGRAD_MUTANTS_JOBS     mutants built and run at a time (default 2)
#   XTGRAD_MUTANTS_TIMEOUT  seconds per test executable run (default 600)
#
# Output: a table (mutant, killed, the failing test cases), then the CI line
#   mutants: N passed, M failed
# (passed = killed). Exit status 0 only when every mutant is killed.
set -euo pipefail

tests_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source_dir=$(cd "$tests_dir/../.." && pwd)
mutant_dir="$tests_dir/mutants"
commands_py="$tests_dir/mutant_commands.py"
build="$source_dir/build/release"
if [[ ${1:-} == --build ]]; then
  (($# >= 2)) || { echo "mutants.sh: --build needs a directory" >&2; exit 2; }
  build=$2
  shift 2
fi
jobs=${XTGRAD_MUTANTS_JOBS:-2}
run_timeout=${XTGRAD_MUTANTS_TIMEOUT:-600}

# The executables whose tests are meant to kill the mutants.
targets=(test_functional test_ffn_modules test_activations test_gated)
[[ -f $source_dir/tests/hardening/test_mutant_guards.cpp ]] && targets+=(test_mutant_guards)

die() {
  echo "mutants.sh: $*" >&2
  exit 2
}

# --- which mutants ----------------------------------------------------------
mutants=()
if (($# == 0)); then
  for f in "$mutant_dir"/*.sed; do [[ -e $f ]] && mutants+=("$f"); done
else
  for name in "$@"; do
    f="$mutant_dir/${name%.sed}.sed"
    [[ -f $f ]] || die "no mutant $f"
    mutants+=("$f")
  done
fi
((${#mutants[@]} > 0)) || die "no mutants in $mutant_dir"
total=${#mutants[@]}

# Whatever happens before the table, CI still reads a failing summary line.
summary_printed=0
on_exit() {
  local status=$?
  if ((summary_printed == 0)); then echo "mutants: 0 passed, $total failed"; fi
  if [[ ${XTGRAD_MUTANTS_KEEP:-0} != 1 && -n ${work_created:-} ]]; then
    rm -rf "$work"
  fi
  exit $status
}
trap on_exit EXIT

[[ -f $build/CMakeCache.txt ]] || die "$build is not a configured CMake build directory (--build DIR)"
build=$(cd "$build" && pwd)
work=${XTGRAD_MUTANTS_DIR:-$build/mutants}

# --- the work directory: one run at a time ----------------------------------
mkdir -p "$(dirname "$work")"
exec 9>"$work.lock"
flock -n 9 || die "another mutation run holds $work.lock"
rm -rf "$work"
mkdir -p "$work"
work_created=1
start_seconds=$SECONDS

# --- every mutant must still apply ------------------------------------------
# apply_mutant MUTANT FILE: applies the sed commands of MUTANT to FILE one at a
# time. Returns 1 at the first command that sed rejects or that changes
# nothing, with apply_error saying which line of MUTANT it is and why.
apply_mutant() {
  local mutant=$1 file=$2 line line_number=0 commands=0
  apply_error=""
  while IFS= read -r line || [[ -n $line ]]; do
    line_number=$((line_number + 1))
    [[ -z ${line//[[:space:]]/} || $line == \#* ]] && continue
    commands=$((commands + 1))
    cp "$file" "$file.before"
    if ! sed -i -e "$line" "$file" 2>"$file.sed.err"; then
      apply_error="sed rejects line $line_number ($(head -n 1 "$file.sed.err")):"$'\n'"    $line"
      return 1
    fi
    if cmp -s "$file.before" "$file"; then
      apply_error="line $line_number changes nothing (its pattern matches no line there):"$'\n'"    $line"
      return 1
    fi
  done <"$mutant"
  rm -f "$file.before" "$file.sed.err"
  if ((commands == 0)); then
    apply_error="the mutant has no sed command"
    return 1
  fi
}

# check_applies MUTANT: returns 0 when every command of MUTANT changes a
# scratch copy of its target; otherwise says why on stderr and returns 1.
check_applies() {
  local mutant=$1 shown target problem
  shown=tests/hardening/mutants/$(basename "$1")
  target=$(sed -n '1s/^# target: *//p' "$mutant")
  if [[ -z $target ]]; then
    problem="line 1 is not '# target: FILE' naming the source file it mutates"
  elif [[ ! -f $source_dir/$target ]]; then
    problem="its target $target (line 1) does not exist: moved, renamed or deleted?"
  else
    cp "$source_dir/$target" "$work/scratch"
    apply_mutant "$mutant" "$work/scratch" && return 0
    problem="in $target, $apply_error"
  fi
  {
    echo "mutants.sh: the mutant $shown no longer applies to ${target:-its target}:"
    echo "  $problem"
    echo "  A mutant that does not apply tests nothing. After a refactor of ${target:-the target},"
    echo "  update $shown (its target line and its sed commands)"
    echo "  so that it plants the same mistake in the new code, or delete it if that mistake"
    echo "  can no longer be made."
  } >&2
  return 1
}

not_applying=0
for mutant in "${mutants[@]}"; do
  check_applies "$mutant" || not_applying=$((not_applying + 1))
done
if ((not_applying > 0)); then
  echo "mutants.sh: update them, or meanwhile run the others by name:" \
    "tests/hardening/mutants.sh NAME..." >&2
  die "$not_applying of $total mutants no longer apply (see above); nothing was built or run"
fi
echo "mutants.sh: all $total mutants apply to the source"

# --- the build they reuse ----------------------------------------------------
echo "mutants.sh: bringing ${targets[*]} up to date in $build"
cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$work/build.log" 2>&1 || {
  tail -n 40 "$work/build.log" >&2
  die "the test executables do not build in $build (log above)"
}
[[ -f $build/libxtgrad.a ]] || die "$build/libxtgrad.a is missing (a static build of the library is needed)"
declare -A members
for mutant in "${mutants[@]}"; do
  target=$(sed -n '1s/^# target: *//p' "$mutant")
  [[ -n ${members[$target]:-} ]] && continue
  members[$target]=$(python3 "$commands_py" member "$build" "$source_dir/$target") ||
    die "$(basename "$mutant"): its target $target has no object in libxtgrad.a to swap (see above)"
  count=$(ar t "$build/libxtgrad.a" | grep -cxF "${members[$target]}" || true)
  ((count == 1)) || die "libxtgrad.a holds $count objects named ${members[$target]} (the object of $target): one is needed to swap it"
done

# run_with_commands LOG SUBCOMMAND ARGS...: runs the command mutant_commands.py
# prints for SUBCOMMAND (its folder first), output to LOG.
run_with_commands() {
  local log=$1
  shift
  local parts=()
  mapfile -d '' parts < <(python3 "$commands_py" "$@") || return 1
  ((${#parts[@]} > 1)) || return 1
  (cd "${parts[0]}" && "${parts[@]:1}") >>"$log" 2>&1
}

# check_mutant NAME MUTANT TARGET: in $work/NAME, applies MUTANT (none:
# unmutated) to a copy of TARGET, builds the test executables against it and
# runs them. Writes $work/NAME/verdict (yes, no, NO BUILD, NOT APPLIED: yes
# when some test fails) and $work/NAME/cases (the doctest "TEST CASE:" names of
# the failures, or a note when an executable died without naming one).
check_mutant() {
  local name=$1 mutant=$2 target=$3 dir="$work/$1" exe status cases failed=0
  local copy member
  mkdir -p "$dir"
  copy="$dir/$(basename "$target")"
  member=${members[$target]}
  cp "$source_dir/$target" "$copy"
  : >"$dir/cases"
  if [[ -n $mutant ]] && ! apply_mutant "$mutant" "$copy"; then
    echo "NOT APPLIED" >"$dir/verdict"
    echo "in $target, ${apply_error//$'\n'/ }" >"$dir/cases"
    return
  fi
  diff -u "$source_dir/$target" "$copy" >"$dir/diff" || true
  mkdir -p "$dir/object"
  cp "$build/libxtgrad.a" "$dir/libxtgrad.a"
  local built=1
  run_with_commands "$dir/build.log" compile "$build" "$source_dir/$target" "$copy" "$dir/object/$member" &&
    ar r "$dir/libxtgrad.a" "$dir/object/$member" >>"$dir/build.log" 2>&1 || built=0
  for exe in "${targets[@]}"; do
    ((built)) || break
    run_with_commands "$dir/build.log" link "$build" "$exe" "$dir/libxtgrad.a" "$dir/$exe" || built=0
  done
  rm -f "$dir/libxtgrad.a"
  if ((!built)); then
    echo "NO BUILD" >"$dir/verdict"
    echo "the mutated copy of $target does not build (log: $dir/build.log with XTGRAD_MUTANTS_KEEP=1)" >"$dir/cases"
    grep -m 3 'error' "$dir/build.log" >&2 || true
    return
  fi
  for exe in "${targets[@]}"; do
    status=0
    timeout "$run_timeout" "$dir/$exe" --no-colors >"$dir/$exe.log" 2>&1 || status=$?
    ((status == 0)) && continue
    failed=1
    cases=$(sed -n 's/^TEST CASE: *//p' "$dir/$exe.log" | awk '!seen[$0]++')
    if [[ -n $cases ]]; then
      printf '%s\n' "$cases" >>"$dir/cases"
    elif ((status == 124)); then
      echo "($exe timed out after ${run_timeout}s)" >>"$dir/cases"
    else
      echo "($exe exited with status $status, no test case named)" >>"$dir/cases"
    fi
  done
  if ((failed)); then echo yes >"$dir/verdict"; else echo no >"$dir/verdict"; fi
}

# --- the unmutated copies, then the mutants, $jobs at a time -----------------
# Each target file gets an unmutated check, queued before its first mutant.
names=()
sources=()
files=()
declare -A queued
for mutant in "${mutants[@]}"; do
  target=$(sed -n '1s/^# target: *//p' "$mutant")
  if [[ -z ${queued[$target]:-} ]]; then
    queued[$target]=1
    names+=("unmutated_${target//\//_}")
    sources+=("")
    files+=("$target")
  fi
  names+=("$(basename "$mutant" .sed)")
  sources+=("$mutant")
  files+=("$target")
done

# verdict_of NAME: what check_mutant wrote, or ERROR if it stopped before.
verdict_of() {
  cat "$work/$1/verdict" 2>/dev/null || echo "ERROR"
}

running=0
for i in "${!names[@]}"; do
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
  (
    mutant_start=$SECONDS
    check_mutant "${names[$i]}" "${sources[$i]}" "${files[$i]}"
    echo "mutants.sh: ${names[$i]}: some test fails = $(verdict_of "${names[$i]}") ($((SECONDS - mutant_start)) s)"
  ) &
  running=$((running + 1))
done
wait

# --- the unmutated copies must pass -------------------------------------------
for i in "${!names[@]}"; do
  [[ -z ${sources[$i]} ]] || continue
  if [[ $(verdict_of "${names[$i]}") != no ]]; then
    sed 's/^/  failing: /' "$work/${names[$i]}/cases" >&2 2>/dev/null || true
    die "the unmutated copy of ${files[$i]}, built the same way, fails its tests: a mutation check means nothing until it passes"
  fi
done
echo "mutants.sh: the unmutated copies pass ($((SECONDS - start_seconds)) s so far)"

# --- report -----------------------------------------------------------------
passed=0
failed=0
echo
printf '%-28s %-12s %-6s %s\n' "mutant" "killed" "cases" "killing test cases (first 3)"
printf '%-28s %-12s %-6s %s\n' "------" "------" "-----" "----------------------------"
for i in "${!names[@]}"; do
  [[ -n ${sources[$i]} ]] || continue
  verdict=$(verdict_of "${names[$i]}")
  if [[ $verdict == yes ]]; then
    passed=$((passed + 1))
    count=$(grep -c . "$work/${names[$i]}/cases")
    first=$(awk 'NR <= 3 { printf "%s%s", (NR > 1 ? "; " : ""), $0 }' "$work/${names[$i]}/cases")
  else
    failed=$((failed + 1))
    count="-"
    first=$(cat "$work/${names[$i]}/cases" 2>/dev/null || echo "(the check stopped: see the messages above)")
    [[ $verdict == no ]] && first="(every test passes: the mutant survives)"
  fi
  printf '%-28s %-12s %-6s %s\n' "${names[$i]}" "$verdict" "$count" "$first"
done
echo
for i in "${!names[@]}"; do
  [[ -n ${sources[$i]} && $(verdict_of "${names[$i]}") == yes ]] || continue
  echo "${names[$i]}: every failing test case"
  sed 's/^/    /' "$work/${names[$i]}/cases"
done
echo "mutants.sh: $((SECONDS - start_seconds)) s in all"
echo "mutants: $passed passed, $failed failed"
summary_printed=1
((failed == 0))
