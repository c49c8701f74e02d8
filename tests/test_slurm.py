"""Sweep workers as Slurm jobs, on a real one-node Slurm cluster (tests/slurm.py: slurmctld,
slurmd and munged started here) and a real PostgreSQL study: two workers submitted with
`autotune sweep --slurm-jobs`, one cancelled mid-trial and resubmitted; nothing measured twice,
nothing lost, no process of the cancelled job left, the password in no script or log.

Without Slurm the test is skipped, except where AUTOTUNE_REQUIRE_SLURM=1 (CI): there a missing
Slurm is a failure, as a missing PostgreSQL is under AUTOTUNE_REQUIRE_POSTGRES.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.record import ControllerRef
from autotune.run.processes import controller_gone
from autotune.run.slurm import SlurmJobRef, batch_script, job_ended
from autotune.run.storage import open_storage
from tests.fixtures.study_tools import cli_env, write_spec
from tests.pg import PASSWORD


@pytest.fixture(scope="module")
def slurm():
    from tests.slurm import SlurmCluster, missing

    why = missing()
    if why:
        if os.environ.get("AUTOTUNE_REQUIRE_SLURM") == "1":
            pytest.fail(why)
        pytest.skip(why)
    cluster = SlurmCluster(cpus=2).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_the_batch_script_quotes_every_value(tmp_path):
    text = batch_script(["/opt/py thon", "-m", "autotune.cli", "sweep", "a'b; rm -rf ~"],
                        tmp_path / "my dir", "autotune-x")
    assert "exec '/opt/py thon' -m autotune.cli sweep 'a'\"'\"'b; rm -rf ~'" in text
    assert f"cd '{tmp_path / 'my dir'}'" in text


def test_without_slurm_whether_a_job_ended_is_unknown(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol on PATH
    assert job_ended(SlurmJobRef(job_id="1")) is None


def test_a_job_slurm_never_heard_of_is_ended(slurm, monkeypatch):
    """The real scontrol's answer for a job id it does not know ("Invalid job id specified":
    a job purged after it ended) reads as ended, not as Slurm unable to say."""
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    never = "67000000"  # under Slurm's default MaxJobId; this fresh cluster counts from 1
    asked = slurm.run("scontrol", "-o", "show", "job", never, check=False)
    assert asked.returncode != 0 and "invalid job id" in asked.stderr.lower(), asked.stderr
    assert job_ended(SlurmJobRef(job_id=never)) is True


def test_slurm_flags_refuse_what_cannot_work(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("sweep", "--slurm-jobs", "2", "--storage", f"sqlite:///{tmp_path / 'a.db'}")
    assert code == 2 and "cannot share the SQLite file" in err
    code, _, err = cli("sweep", "--sbatch-arg=--gres=gpu:1")
    assert code == 2 and "without --slurm-jobs" in err
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here

    def on_the_login_node():
        raise AssertionError("hardware detected on the login node")

    from autotune.run import hardware

    monkeypatch.setattr(hardware, "local_hardware", on_the_login_node)  # the jobs detect it, not this
    code, _, err = cli("sweep", "--slurm-jobs", "1", "--storage", f"journal:///{tmp_path / 's.log'}")
    assert code == 2 and "sbatch not found" in err, err
    assert not (tmp_path / "a.db").exists()  # nothing created for a refused submission
    code, _, err = cli("sweep", "--tasks-dir", "t")
    assert code == 2 and "--tasks-dir given without --skypilot-task" in err


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_study_status_lists_workers_and_jobs(cli, tmp_path, monkeypatch):
    """Workers from the controllers the trials record; jobs from the study's list, their state
    "unknown" where Slurm cannot be asked (no scontrol here)."""
    from autotune.cli.sweep_slurm import record_jobs
    from autotune.record import TrialRecord
    from autotune.search.study import open_study

    url = f"sqlite:///{tmp_path / 's.db'}"
    st = open_study(url, "st")
    for job, pid in (("41", 100), ("41", 100), ("41", 100), ("42", 200)):
        trial = st.ask()
        TrialRecord.write(trial, controller={"host": "n1", "pid": pid, "slurm_job_id": job})
        if pid == 100:  # two measured; the third failed (as a later sweep fails a dead job's)
            st.tell(trial, [1.0, 2.0] if trial.number < 2 else None,
                    state=TrialState.COMPLETE if trial.number < 2 else TrialState.FAIL)
    # A sweep on this machine killed outright (kill -9): its trial stays RUNNING in the study
    # until the next sweep here fails it. The status said "running trial 4" and nothing more.
    dead = subprocess.Popen(["true"])
    dead.wait()
    TrialRecord.write(st.ask(), controller={"host": socket.gethostname(), "pid": dead.pid})
    record_jobs(st, ["41", "42"], "/runs/st/slurm/worker.sbatch", "/runs/st/slurm/worker-%j.out")
    monkeypatch.setenv("PATH", str(tmp_path))
    code, out, err = cli("study", "status", "--storage", url, "--study", "st")
    assert code == 0, err
    assert "n1 pid 100 slurm job 41: 3 trial(s) finished (2 complete, 1 failed)" in out
    # Slurm cannot be asked here, so job 42's controller may be alive: nothing more is said.
    assert "n1 pid 200 slurm job 42: 0 trial(s) finished, running trial 3\n" in out
    assert (f"pid {dead.pid}: 0 trial(s) finished, running trial 4 (its controller is gone: the next "
            f"sweep of the study on {socket.gethostname()} fails it and queues it again)") in out
    assert "slurm job 42: unknown" in out and "worker-42.out" in out


def _cli(args: list[str], cwd: Path, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _submit(cwd: Path, spec: Path, env: dict, jobs: int, trials: int) -> list[str]:
    done = _cli(["sweep", str(spec), "--trials", str(trials), "--runs-dir", "runs",
                 "--slurm-jobs", str(jobs), "--sbatch-arg=--cpus-per-task=1", "--json"], cwd, env)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)["slurm"]["jobs"]


def test_a_submission_names_its_storage_and_a_refused_one_leaves_nothing(tmp_path, slurm):
    """The Watch line works as printed (--storage-file by its absolute path; a --storage URL
    never repeated, and warned of); a job sbatch refuses leaves no script or folder of its own,
    and an earlier submission's script as it was. Jobs are held: nothing runs."""
    (tmp_path / "spec.yaml").write_text("study: sub\nworkload: {kind: gpt, preset: tiny}\n")
    url = f"journal:///{tmp_path / 'study.log'}"
    (tmp_path / "db-url").write_text(url + "\n")
    env = cli_env(**slurm.env)
    env.pop("AUTOTUNE_STORAGE", None)
    sweep = ["sweep", "spec.yaml", "--runs-dir", "runs", "--slurm-jobs", "1"]
    done = _cli([*sweep, "--storage-file", "db-url", "--sbatch-arg=--hold"], tmp_path, env)
    assert done.returncode == 0, done.stdout + done.stderr
    watch = done.stdout.split("Watch: ")[1].split()
    assert watch[-2:] == ["--storage-file", str(tmp_path / "db-url")], done.stdout
    status = _cli(watch[1:], tmp_path, env)  # as printed, from elsewhere too
    assert status.returncode == 0, status.stdout + status.stderr
    script = tmp_path / "runs" / "sub" / "slurm" / "worker.sbatch"
    earlier = script.read_text()

    done = _cli([*sweep, "--storage", url, "--study", "other", "--sbatch-arg=--hold"], tmp_path, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--storage URL" in done.stdout and url not in done.stdout + done.stderr
    (warning,) = [ln for ln in done.stderr.splitlines() if ln.startswith("warning")]
    assert "(ps)" in warning and "--storage-file FILE or AUTOTUNE_STORAGE" in warning

    for study, folder in (("sub", script.parent), ("fresh", tmp_path / "runs" / "fresh")):
        done = _cli([*sweep, "--storage-file", "db-url", "--study", study, "--trials", "9",
                     "--sbatch-arg=--gres=gpu:8"], tmp_path, env)
        assert done.returncode == 2 and "sbatch refused the job" in done.stderr, done.stdout + done.stderr
        assert folder.exists() == (study == "sub")  # no folder of the refused submission's own
    assert script.read_text() == earlier and "--trials" not in earlier
    slurm.cancel_all()


@pytest.mark.e2e
def test_a_percent_sign_in_the_runs_dir_is_not_read_as_a_slurm_pattern(tmp_path, slurm):
    """sbatch expands %j, %x ... anywhere in --output, the folder's own name included: a runs
    dir "runs 50%x %j" named a folder that does not exist ("runs 50autotune-pct 7") and the
    job failed to launch (JobLaunchFailure). Now the job runs its one-trial sweep, its output
    lies in the folder as written, and the study records that path."""
    spec = write_spec(tmp_path, "pct", [1], timeout_s=120)
    (tmp_path / "db-url").write_text(f"journal:///{tmp_path / 'study.log'}\n")
    env = cli_env(**slurm.env)
    env.pop("AUTOTUNE_STORAGE", None)
    done = _cli(["sweep", str(spec), "--trials", "1", "--runs-dir", "runs 50%x %j", "--slurm-jobs", "1",
                 "--storage-file", "db-url", "--json"], tmp_path, env)
    assert done.returncode == 0, done.stdout + done.stderr
    (job,) = json.loads(done.stdout)["slurm"]["jobs"]
    assert slurm.wait_job(job, ("COMPLETED", "FAILED"), timeout_s=240) == "COMPLETED", slurm.logs()
    log = tmp_path / "runs 50%x %j" / "pct" / "slurm" / f"worker-{job}.out"
    assert "trial   0  ok" in log.read_text(), log.read_text()
    status = _cli(["study", "status", "--study", "pct", "--storage-file", "db-url"], tmp_path, env)
    assert str(log) in status.stdout, status.stdout + status.stderr


def _job_processes(job_id: str) -> list[int]:
    """Live processes started by Slurm job `job_id` (they carry SLURM_JOB_ID in their environment)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            env = open(f"/proc/{entry}/environ", "rb").read().split(b"\0") if entry.isdigit() else []
            state = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[0] if env else "Z"
        except OSError:
            continue
        if state != "Z" and f"SLURM_JOB_ID={job_id}".encode() in env:
            found.append(int(entry))
    return found


def _wait_running_trial(storage, study: str, job_id: str, timeout_s: float = 240) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            trials = optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
        except KeyError:
            trials = []
        for t in trials:
            ctl = t.user_attrs.get("controller") or {}
            # Launched: its processes run (a trial still being proposed has no "launch").
            if t.state is TrialState.RUNNING and ctl.get("slurm_job_id") == job_id and "launch" in t.user_attrs:
                return t.number
        time.sleep(0.2)
    raise TimeoutError(f"job {job_id} ran no trial within {timeout_s} s")


@pytest.mark.e2e
def test_two_slurm_workers_share_a_study_and_a_cancelled_job_is_recovered(tmp_path, postgres, slurm,
                                                                           monkeypatch):
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])  # this process asks Slurm too
    study = f"slurm{os.getpid()}"
    spec = write_spec(tmp_path, study, [1, 2, 4], timeout_s=120)
    env = cli_env(**slurm.env, AUTOTUNE_STORAGE=postgres.url)  # the URL only in the environment
    # What this test pins is that Slurm's SIGTERM ends the cut trial, in its own controller.
    # With the suite's 4 s grace, a loaded machine (Slurm still reporting the job as
    # cancelling) let B's heartbeat check fail it first, without the Slurm job in its error (a
    # CI run, 2026-12-03): the grace here outlasts the test, so no heartbeat can end it.
    env["AUTOTUNE_GRACE_S"] = "900"
    storage = open_storage(postgres.url)

    job_a, job_b = _submit(tmp_path, spec, env, jobs=2, trials=2)
    victim = _wait_running_trial(storage, study, job_a)
    trial_dir = Path(optuna.load_study(study_name=study, storage=storage).trials[victim].user_attrs["trial_dir"])
    command = json.loads((trial_dir / "command.json").read_text())
    assert "pool_trial" in command, command  # pooled: its queue folder is in /tmp
    queue = command["argv"][command["argv"].index("--queue") + 1]
    slurm.run("scancel", job_a)
    assert slurm.wait_job(job_a, ("CANCELLED",)) == "CANCELLED"
    deadline = time.monotonic() + 30  # Slurm's SIGKILL follows its SIGTERM after KillWait
    while _job_processes(job_a) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _job_processes(job_a) == [], "processes of the cancelled job are left"
    assert not os.path.exists(queue), f"the cancelled job left its pool's {queue}"
    # From another host, the pid says nothing; Slurm says the job ended (and B's did not).
    elsewhere = {"host": "another-node", "pid": 1, "start_ticks": None}
    assert controller_gone(ControllerRef(**elsewhere, slurm_job_id=job_a), "this-node")
    assert not controller_gone(ControllerRef(**elsewhere, slurm_job_id=job_b), "this-node")
    assert controller_gone(ControllerRef(**elsewhere, slurm_job_id=job_b, slurm_restarts=1), "this-node")

    # The resubmitted worker finds the cut trial re-queued (by A itself) behind the baselines: 3 trials
    # reach it whatever B has done by then.
    (job_c,) = _submit(tmp_path, spec, env, jobs=1, trials=3)
    for job in (job_b, job_c):
        assert slurm.wait_job(job, ("COMPLETED", "FAILED"), timeout_s=600) == "COMPLETED", \
            (tmp_path / "runs" / study / "slurm" / f"worker-{job}.out").read_text()

    trials = optuna.load_study(study_name=study, storage=storage).trials
    states = {t.number: (t.state.name, t.user_attrs.get("error")) for t in trials}
    assert not [t for t in trials if t.state is TrialState.RUNNING], states
    cut = trials[victim]
    assert cut.state is TrialState.FAIL and cut.user_attrs.get("status") == "interrupted", states
    assert cut.user_attrs["error"].startswith(f"stopped by SIGTERM in Slurm job {job_a}"), states
    # Nothing lost: the cut trial's config was measured after all, by a retry of it.
    done = [t for t in trials if t.state is TrialState.COMPLETE]
    measured = [t for t in done if "reused_from" not in t.user_attrs and "repeat_of" not in t.user_attrs]
    assert cut.params in [t.params for t in measured], states
    # Nothing measured twice (deliberate repeats of the racing stage aside).
    keys = [t.user_attrs["config_key"] for t in measured]
    assert len(keys) == len(set(keys)), states
    # The cancelled job measured nothing to the end. It may still have completed a trial by
    # reusing another worker's measurement of the same config (a fresh-clone CI, 2026-12-04: A's
    # trial 0 waited for B's trial 1 and reused it, then A's next trial was the one cut).
    ran = [t for t in done if "reused_from" not in t.user_attrs]
    assert {t.user_attrs["controller"].get("slurm_job_id") for t in ran} <= {job_b, job_c}, states

    status = _cli(["study", "status", "--study", study, "--json"], tmp_path, env)
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    assert {w["slurm_job_id"] for w in doc["workers"]} == {job_a, job_b, job_c}
    assert {j["job_id"]: j["state"] for j in doc["slurm_jobs"]} == {
        job_a: "CANCELLED", job_b: "COMPLETED", job_c: "COMPLETED"}

    folder = tmp_path / "runs" / study / "slurm"
    for f in folder.iterdir():
        assert PASSWORD not in f.read_text() and "S3cret" not in f.read_text(), f
    assert "AUTOTUNE_STORAGE" not in (folder / "worker.sbatch").read_text()


# Multi-node trials through the cluster's launcher: srun starts one torchrun agent per "node"
# (here two tasks on the one node stand in for two nodes, as in tests/test_multinode.py), the
# agents meet at a c10d rendezvous; no agent poller of ours in between.
SRUN_TEMPLATE = ["srun", "--nodes=1", "--ntasks={num_nodes}", "--kill-on-bad-exit=1", "{launcher_argv}"]


def _trial_cfg(timeout_s: float):
    from autotune.contract import GPTWorkload, TrialConfig

    return TrialConfig(workload=GPTWorkload(preset="tiny"), seq_len=32, micro_batch_size=2,
                       warmup_steps=1, measure_steps=2, max_measure_steps=2, timeout_s=timeout_s,
                       measure_noise_scale=False, num_gpus=1, num_nodes=2)


@pytest.mark.e2e
def test_a_two_node_trial_runs_through_srun(tmp_path, slurm, monkeypatch):
    from autotune.contract import TrialStatus
    from autotune.run.launch import run_trial, template_argv_builder

    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    build = template_argv_builder(SRUN_TEMPLATE, rdzv_host="127.0.0.1")
    result = run_trial(_trial_cfg(300), tmp_path / "trial", argv_builder=build)
    assert result.status is TrialStatus.ok, (result.error, result.log_tail)
    assert result.world_size == 2 and result.tokens_per_s > 0
    assert not (tmp_path / "trial" / "nodes.json").exists()  # srun fanned out, not autotune.run.nodes


@pytest.mark.e2e
def test_a_timed_out_srun_trial_leaves_no_agent_on_any_node(tmp_path, slurm, monkeypatch):
    from autotune.contract import TrialStatus
    from autotune.run.launch import run_trial, template_argv_builder
    from tests.fixtures.study_tools import processes_under

    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    build = template_argv_builder(SRUN_TEMPLATE, rdzv_host="127.0.0.1")
    # 4 s: the agents are still importing torch or meeting when the timeout strikes.
    result = run_trial(_trial_cfg(4), tmp_path / "trial", argv_builder=build)
    assert result.status is TrialStatus.timeout, (result.error, result.log_tail)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (processes_under(tmp_path / "trial")
                                           or slurm.run("squeue", "-h", "-s").stdout.strip()):
        time.sleep(0.5)
    assert processes_under(tmp_path / "trial") == []
    assert slurm.run("squeue", "-h", "-s").stdout.strip() == ""  # no job step left running


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_study_status_says_a_trial_whose_slurm_job_ended_is_failed_by_the_next_sweep(cli, slurm, tmp_path, monkeypatch):
    """A RUNNING trial of another machine's worker whose Slurm job the real Slurm says has ended
    (a job id it never heard of reads as purged): any sweep of the study fails it next (the
    sentence read "(its Slurm job N ended fails it and queues it again)")."""
    from autotune.record import TrialRecord
    from autotune.search.study import open_study

    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    url = f"sqlite:///{tmp_path / 's.db'}"
    st = open_study(url, "st")
    TrialRecord.write(st.ask(), controller={"host": "n1", "pid": 300, "slurm_job_id": "67000000"})
    code, out, err = cli("study", "status", "--storage", url, "--study", "st")
    assert code == 0, err
    assert ("n1 pid 300 slurm job 67000000: 0 trial(s) finished, running trial 0 (its Slurm job 67000000 "
            "ended: the next sweep of the study fails it and queues it again)") in " ".join(out.split()), out
    # The report said "1 running" of it, and of a trial whose controller here was killed outright.
    dead = subprocess.Popen(["true"])
    dead.wait()
    TrialRecord.write(st.ask(), controller={"host": socket.gethostname(), "pid": dead.pid})
    code, out, err = cli("report", "--json", "--storage", url, "--study", "st")
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert ("trial 0 is not running: its Slurm job 67000000 ended; the next sweep of the study fails it and "
            "queues it again") in notes, notes
    assert (f"trial 1 is not running: its controller (pid {dead.pid} on {socket.gethostname()}) is gone; the "
            f"next sweep of the study on {socket.gethostname()} fails it and queues it again") in notes, notes
