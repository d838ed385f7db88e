#!/usr/bin/env bash
# The pipeline on a real SLURM cluster: `snakemake --profile slurm` end to end.
#
#   sudo bash tests/slurm/run.sh            (root: installs packages, starts daemons)
#
# 1. installs munge, SLURM and its accounting (slurmdbd + MariaDB) from the package
#    registry (apt), if missing;
# 2. starts a one-node cluster on this machine: partitions `main` (default) and
#    `gpu`, two fake GPUs (GRES on /dev/null, /dev/zero), accounting so `sacct`
#    works as on real clusters; everything under a fresh work folder;
# 3. runs the pipeline from the repository root with `--profile slurm` on the small
#    config tests/slurm/config.yaml, adding only test settings (fast status polls,
#    a 2 s checkpoint cadence, the work folder);
# 4. while it runs, cancels one training job (scancel) after its first checkpoint;
# 5. checks: every training/HMC log records its SLURM_JOB_ID and sacct lists that job
#    COMPLETED, the cancelled job is CANCELLED in sacct and its retry's log says it
#    resumed from the checkpoint, every output of the workflow exists;
# 6. stops every daemon it started, by the PID it recorded, whatever happened.
#
# Environment: PYTHON (default: python; must have snakemake and
# snakemake-executor-plugin-slurm), SLURM_TEST_WORK (work folder; default: a new
# folder under /tmp), SLURM_TEST_TIMEOUT (seconds for the pipeline; default 420).
set -euo pipefail
# the daemons (mariadbd, slurmctld, slurmd, slurmdbd) live in /usr/sbin, which a minimal
# PATH (env PATH=/usr/local/bin:/usr/bin:/bin) leaves out: mariadbd was "not found" there
case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH="$PATH:/usr/sbin" ;; esac
case ":$PATH:" in *:/sbin:*) ;; *) PATH="$PATH:/sbin" ;; esac
export PATH

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PYTHON=${PYTHON:-python}
PYTHON=$(command -v "$PYTHON")
WORK=${SLURM_TEST_WORK:-$(mktemp -d /tmp/repens-slurm.XXXXXX)}
TIMEOUT=${SLURM_TEST_TIMEOUT:-420}
T0=$(date +%s)
mkdir -p "$WORK"
chmod 755 "$WORK"
# The cluster's config goes where every SLURM command looks without SLURM_CONF
# (the executor plugin drops SLURM_* variables before its inner srun): /etc/slurm.
# Files already there are moved aside and put back on exit.
ETC=/etc/slurm RUN=$WORK/run STATE=$WORK/state DB=$WORK/mysql OUT=$WORK/pipeline
unset SLURM_CONF

say() { printf '[slurm-test %4ds] %s\n' "$(($(date +%s) - T0))" "$*"; }
fail() { say "FAIL: $*"; exit 1; }

if [ "$(id -u)" != 0 ]; then
    echo "tests/slurm/run.sh must run as root (it installs packages and starts daemons)" >&2
    exit 2
fi

# ---------------------------------------------------------------- daemons, stopped by PID
PIDS=() # "name:pid", in start order
stop_daemons() {
    local i entry name pid
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        entry=${PIDS[i]} name=${entry%%:*} pid=${entry#*:}
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
            if kill -0 "$pid" 2>/dev/null; then
                kill -KILL "$pid" 2>/dev/null || true
                say "stopped $name (pid $pid) with SIGKILL"
            else
                say "stopped $name (pid $pid)"
            fi
        fi
    done
    PIDS=()
}
on_exit() {
    local rc=$?
    trap - EXIT INT TERM
    # a pipeline still running (timeout, error) goes first, then its SLURM jobs
    # (SNAKEMAKE_PID is `timeout -k 30`: it passes TERM on and kills after 30 s)
    if [ -n "${SNAKEMAKE_PID:-}" ] && kill -0 "$SNAKEMAKE_PID" 2>/dev/null; then
        kill -TERM "$SNAKEMAKE_PID" 2>/dev/null || true
        for _ in $(seq 1 40); do kill -0 "$SNAKEMAKE_PID" 2>/dev/null || break; sleep 1; done
    fi
    if [ ${#PIDS[@]} -gt 0 ] && command -v scancel >/dev/null; then
        scancel --user=root 2>/dev/null || true
    fi
    stop_daemons
    for f in slurm.conf gres.conf slurmdbd.conf; do
        if [ -e "$WORK/etc-saved/$f" ]; then mv -f "$WORK/etc-saved/$f" "$ETC/$f"; elif [ -n "${ETC_WRITTEN:-}" ]; then rm -f "$ETC/$f"; fi
    done
    say "work folder: $WORK"
    if [ "$rc" = 0 ]; then say "PASSED"; else say "FAILED (exit $rc)"; fi
    exit "$rc"
}
trap on_exit EXIT
trap 'say "error: line $LINENO: $BASH_COMMAND"' ERR
trap 'exit 130' INT TERM

pidfile_pid() { # wait for a daemon's pidfile, print the PID
    local file=$1
    for _ in $(seq 1 100); do
        if [ -s "$file" ] && kill -0 "$(cat "$file")" 2>/dev/null; then cat "$file"; return 0; fi
        sleep 0.2
    done
    return 1
}

# ---------------------------------------------------------------- 1. packages
PACKAGES=(munge slurm-client slurmctld slurmd slurmdbd mariadb-server)
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    # keep package scripts from starting daemons we would not know the PIDs of
    policy_added=
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
        policy_added=1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    [ -n "$policy_added" ] && rm -f /usr/sbin/policy-rc.d
fi
say "$(dpkg-query -W -f='${Package} ${Version}; ' "${PACKAGES[@]}")"
# the clients the executor and the checks below call: a PATH that hides one would
# otherwise surface only later, as a node that never reads idle
for c in sbatch srun scancel squeue sinfo sacct; do
    command -v "$c" >/dev/null || fail "SLURM client '$c' is not on PATH although its package is installed (PATH=$PATH)"
done

# ---------------------------------------------------------------- 2. the cluster
mkdir -p "$WORK/etc-saved"
for f in slurm.conf gres.conf slurmdbd.conf; do [ -e "$ETC/$f" ] && mv "$ETC/$f" "$WORK/etc-saved/$f"; done
ETC_WRITTEN=1
mkdir -p "$ETC" "$RUN/slurm" "$RUN/mysql" "$STATE/ctld" "$STATE/d" "$DB" "$OUT"
chown slurm:slurm "$STATE/ctld" "$RUN/slurm"
chown mysql:mysql "$DB" "$RUN/mysql"
HOST=$(hostname -s)
CPUS=$(nproc)
MEM_MB=$(($(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 1024))
DB_PORT=3316 DBD_PORT=6829 CTLD_PORT=6827 SLURMD_PORT=6828

# munge: a key if the package made none, then munged
[ -s /etc/munge/munge.key ] || { mungekey --create --keyfile=/etc/munge/munge.key; chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; }
install -d -o munge -g munge -m 755 /run/munge
su -s /bin/sh munge -c "/usr/sbin/munged" ||
    fail "munged did not start (is another munged running? stop it first)"
PIDS+=("munged:$(pidfile_pid /run/munge/munged.pid)")

# MariaDB on a private data folder and port, for slurmdbd
mariadb-install-db --user=mysql --datadir="$DB" --auth-root-authentication-method=socket >"$WORK/mariadb-install.log" 2>&1 ||
    { cat "$WORK/mariadb-install.log"; fail "mariadb-install-db failed"; }
setsid /usr/sbin/mariadbd --user=mysql --datadir="$DB" --socket="$RUN/mysql/mysqld.sock" --pid-file="$RUN/mysql/mysqld.pid" \
    --bind-address=127.0.0.1 --port=$DB_PORT --log-error="$WORK/mariadb.log" </dev/null >/dev/null 2>&1 &
PIDS+=("mariadbd:$!")
for _ in $(seq 1 100); do mariadb --socket="$RUN/mysql/mysqld.sock" -e 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
mariadb --socket="$RUN/mysql/mysqld.sock" <<'SQL' || fail "MariaDB setup failed (see $WORK/mariadb.log; mariadbd $(kill -0 "${PIDS[-1]#*:}" 2>/dev/null && echo "still running" || echo "exited"))"
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
SQL

cat >"$ETC/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=slurm
PidFile=$RUN/slurm/slurmdbd.pid
LogFile=$WORK/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
chown slurm:slurm "$ETC/slurmdbd.conf"
chmod 600 "$ETC/slurmdbd.conf"

cat >"$ETC/slurm.conf" <<EOF
ClusterName=repens-ci
SlurmctldHost=$HOST
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
SlurmUser=slurm
SlurmdUser=root
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$RUN/slurm/slurmctld.pid
SlurmdPidFile=$RUN/slurm/slurmd.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStorageTRES=gres/gpu
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
MinJobAge=300
KillWait=30
ReturnToService=2
MailProg=/bin/true
GresTypes=gpu
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM_MB Gres=gpu:2 State=UNKNOWN
PartitionName=main Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$HOST MaxTime=INFINITE State=UP
EOF
cat >"$ETC/gres.conf" <<EOF
AutoDetect=off
NodeName=$HOST Name=gpu File=/dev/null
NodeName=$HOST Name=gpu File=/dev/zero
EOF

/usr/sbin/slurmdbd || fail "slurmdbd did not start (see $WORK/slurmdbd.log)"
PIDS+=("slurmdbd:$(pidfile_pid "$RUN/slurm/slurmdbd.pid")")
for _ in $(seq 1 50); do (exec 3<>"/dev/tcp/127.0.0.1/$DBD_PORT") 2>/dev/null && break; sleep 0.2; done
/usr/sbin/slurmctld || fail "slurmctld did not start (see $WORK/slurmctld.log)"
PIDS+=("slurmctld:$(pidfile_pid "$RUN/slurm/slurmctld.pid")")
/usr/sbin/slurmd || fail "slurmd did not start (see $WORK/slurmd.log)"
PIDS+=("slurmd:$(pidfile_pid "$RUN/slurm/slurmd.pid")")
for _ in $(seq 1 150); do
    state=$(sinfo --noheader --partition=gpu --format=%t 2>/dev/null || true)
    [ "$state" = idle ] && break
    sleep 0.2
done
[ "$state" = idle ] || { sinfo || true; fail "node not idle (see $WORK/slurmd.log, $WORK/slurmctld.log)"; }
for _ in $(seq 1 50); do sacct --noheader -X >/dev/null 2>&1 && break; sleep 0.2; done
sacct --noheader -X >/dev/null || fail "sacct does not answer (see $WORK/slurmdbd.log)"
say "cluster up: $(sinfo --noheader --format='%P %D %c %G %t' | tr '\n' ';')"

# ---------------------------------------------------------------- 3. the pipeline
cd "$ROOT" # the documented command: from the repository root, results in $OUT
cp "$ROOT/config.yaml" "$OUT/config.yaml" # the Snakefile's configfile is read in the workdir
# Every synthetic output and Figure 1 (toy regression, with its HMC reference). Not the
# toy classification: its NUTS at this tiny size gives NaN R-hat, which stops the job.
TARGETS=(results/synthetic/metrics.csv results/synthetic/metrics.tex results/figures/fig2_gaussian.png
    results/figures/fig2_gaussian.pdf results/figures/figF1_funnel.png results/figures/figF1_funnel.pdf
    results/figures/fig1_regression.png results/figures/fig1_regression.pdf)
# Table 1's training job (the one users send to GPUs) too, where image data is at hand:
# the data rule copies it from the mirror (no network) on the submitting node.
CONFIGFILES=("$ROOT/tests/slurm/config.yaml")
SHARED_DATA=${REPENS_SHARED_DATA:-$ROOT/../shared/data}
IMAGE_LOGS=""
if [ -d "$SHARED_DATA/FashionMNIST/raw" ] && [ -d "$SHARED_DATA/MNIST/raw" ]; then
    SHARED_DATA=$(cd "$SHARED_DATA" && pwd)
    TARGETS+=(results/table1.tex results/table1.png)
    printf 'image_data_mirror: %s\nimage_data_download: false\n' "$SHARED_DATA" >"$WORK/image-data.yaml"
    CONFIGFILES+=("$WORK/image-data.yaml")
    IMAGE_LOGS="logs/image/*/*/*.log"
else
    say "no FashionMNIST/MNIST copy at $SHARED_DATA: Table 1's job is left out"
fi
# (--configfile takes several files: a flag must follow them, never the targets)
SMK=("$PYTHON" -m snakemake --profile slurm --directory "$OUT" --configfile "${CONFIGFILES[@]}"
    --slurm-init-seconds-before-status-checks 2 --seconds-between-status-checks 2)

say "profile mistakes are caught before anything is submitted"
if out=$("${SMK[@]}" -n --set-resources train_toy:gpu=1 "train_toy:slurm_partition='nope'" 2>&1); then
    fail "a missing partition passed the check"
fi
grep -q "asks for partition 'nope', which this cluster does not have" <<<"$out" || { tail -20 <<<"$out"; fail "no clear error for a missing partition"; }
"${SMK[@]}" -n "${TARGETS[@]}" >"$WORK/plan.txt" 2>&1 || { tail -30 "$WORK/plan.txt"; fail "dry run failed"; }
# GPUs only for the image training jobs (Table 1); the CPU training jobs on `main`
plan_resources() { # the 'resources:' lines of one rule's jobs in the dry run
    awk -v rule="rule $1:" '/^rule /{on = ($0 == rule)} on && /^ *resources:/' "$WORK/plan.txt"
}
cpu_plan=$(plan_resources train_synthetic)
[ -n "$cpu_plan" ] || fail "the plan has no train_synthetic job"
if grep -q "gpu=\|gres=" <<<"$cpu_plan"; then fail "the plan asks for a GPU for a CPU job: $cpu_plan"; fi
grep -q "slurm_partition=main" <<<"$cpu_plan" || fail "the CPU jobs are not on the CPU partition: $cpu_plan"
if [ -n "$IMAGE_LOGS" ]; then
    gpu_plan=$(plan_resources train_image)
    if ! grep -q "gpu=1" <<<"$gpu_plan" || ! grep -q "slurm_partition=gpu" <<<"$gpu_plan"; then
        fail "the plan asks for no GPU for the image job: $gpu_plan"
    fi
fi

say "snakemake --profile slurm (tests/slurm/config.yaml), log: $WORK/snakemake.log"
export REPENS_CHECKPOINT_SECONDS=2 # test only: checkpoint every 2 s (default 300)
timeout -k 30 "$TIMEOUT" "${SMK[@]}" "${TARGETS[@]}" >"$WORK/snakemake.log" 2>&1 &
SNAKEMAKE_PID=$!

# ---------------------------------------------------------------- 4. cancel one job
VICTIM_LOG=$OUT/logs/synthetic/gaussian/svgd/seed42.log
VICTIM_CKPT=$OUT/results/synthetic/gaussian/svgd/seed42/particles.npz.ckpt
cancelled=
for _ in $(seq 1 $((TIMEOUT * 2))); do
    kill -0 "$SNAKEMAKE_PID" 2>/dev/null || break
    if [ -s "$VICTIM_CKPT" ] && grep -q "SLURM_JOB_ID=" "$VICTIM_LOG" 2>/dev/null; then
        cancelled=$(grep -o "SLURM_JOB_ID=[0-9]*" "$VICTIM_LOG" | head -1 | cut -d= -f2)
        # an array task is cancelled by <array job>_<task> (its own id is ignored by scancel)
        array=$(grep -o "SLURM_ARRAY_JOB_ID=[0-9][0-9]* SLURM_ARRAY_TASK_ID=[0-9][0-9]*" "$VICTIM_LOG" | head -1 |
            sed 's/SLURM_ARRAY_JOB_ID=\([0-9]*\) SLURM_ARRAY_TASK_ID=\([0-9]*\)/\1_\2/' || true)
        target=${array:-$cancelled}
        say "checkpoint written: $(tail -1 "$VICTIM_LOG" | cut -c1-120)"
        # SIGTERM to the job's steps, as SLURM sends before a time limit (--signal) or
        # on preemption: training checkpoints and exits 143, the job ends FAILED and
        # Snakemake retries it. (A plain `scancel` ends it CANCELLED, which
        # snakemake-executor-plugin-slurm 2.8.0 did not notice: the run hung.)
        say "scancel --signal=TERM $target (SLURM job $cancelled: train_synthetic gaussian/svgd)"
        scancel --signal=TERM "$target" || fail "scancel $target failed"
        break
    fi
    sleep 0.5
done
[ -n "$cancelled" ] || { tail -30 "$WORK/snakemake.log"; fail "the job to cancel never wrote a checkpoint"; }

rc=0
wait "$SNAKEMAKE_PID" || rc=$?
SNAKEMAKE_PID=
say "snakemake exited $rc"
if [ "$rc" != 0 ]; then tail -60 "$WORK/snakemake.log"; fail "the pipeline failed (exit $rc)"; fi

# ---------------------------------------------------------------- 5. checks
cd "$OUT"
grep -c "sbatch call\|submitted with SLURM jobid\|SLURM jobid" "$WORK/snakemake.log" >/dev/null ||
    fail "no SLURM submission in the snakemake log"
say "submissions: $(grep -o 'SLURM jobid [0-9_]*\|SLURM run ID [^ ]*' "$WORK/snakemake.log" | head -3 | tr '\n' ';') ..."

cd "$ROOT"
"${SMK[@]}" -n "${TARGETS[@]}" >"$WORK/after.txt" 2>&1 || true
grep -q "Nothing to be done" "$WORK/after.txt" || { tail -30 "$WORK/after.txt"; fail "outputs are missing or out of date after the run"; }
cd "$OUT"
say "all outputs built: $(cd "$OUT" && ls results/figures results/synthetic/metrics.csv | tr '\n' ' ')"

# shellcheck disable=SC2086
logs=$(ls logs/synthetic/*/*/*.log logs/toy/regression/*/*.log $IMAGE_LOGS)
n=0
for log in $logs; do
    id=$(grep -o "SLURM_JOB_ID=[0-9]*" "$log" | tail -1 | cut -d= -f2 || true)
    [ -n "$id" ] || fail "$log records no SLURM_JOB_ID: the job did not run inside SLURM"
    state=$(sacct --noheader -X --parsable2 --format=State --jobs "$id" | head -1)
    [ "$state" = COMPLETED ] || fail "$log: SLURM job $id is '$state' in sacct, not COMPLETED"
    tres=$(sacct --noheader -X --parsable2 --format=AllocTRES --jobs "$id" | head -1)
    case "$log" in
    logs/image/*) [[ "$tres" == *gres/gpu* ]] || fail "$log: image job $id was given no GPU ($tres)" ;;
    *) [[ "$tres" != *gres/gpu* ]] || fail "$log: CPU job $id was given a GPU ($tres)" ;;
    esac
    printf '  %-48s SLURM job %-5s %s\n' "$log" "$id" "$state"
    n=$((n + 1))
done
say "$n training/HMC jobs ran in SLURM and sacct lists them COMPLETED"

state=$(sacct --noheader -X --parsable2 --format=State --jobs "$cancelled" | head -1)
[[ "$state" == FAILED* || "$state" == CANCELLED* ]] || fail "sacct lists the interrupted job $cancelled as '$state'"
resumed=$(grep "resumed from" "$VICTIM_LOG" || true)
[ -n "$resumed" ] || { cat "$VICTIM_LOG"; fail "the retry of job $cancelled did not resume from its checkpoint"; }
retry=$(grep -o "SLURM_JOB_ID=[0-9]*" "$VICTIM_LOG" | tail -1 | cut -d= -f2)
say "job $cancelled: $state; its retry (SLURM job $retry) logged: ${resumed#* INFO }"
[ ! -e "$VICTIM_CKPT" ] || fail "the checkpoint was not removed after the retry finished"

say "sacct (all jobs):"
sacct -X --format=JobID%-12,JobName%-14,Partition,AllocTRES%-40,State,Elapsed,ExitCode | sed 's/^/  /'
say "done in $(($(date +%s) - T0)) s"
