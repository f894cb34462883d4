"""A whole session driven from Python: a third-party agent written from the
proto alone (generated stubs, no InfraRSI code) and the team's side through
client/python's wrapper, against a real infrarsi-server.

Usage: third_party_agent_test.py SERVER_BIN STUBS_DIR CLIENT_PYTHON_DIR
"""
import os
import subprocess
import sys
import tempfile
import threading

server_bin, stubs, client_dir = sys.argv[1:4]
sys.path[:0] = [stubs, client_dir]

import grpc  # noqa: E402

import infrarsi_client  # noqa: E402
from infrarsi.v1 import infrarsi_pb2 as pb  # noqa: E402
from infrarsi.v1 import infrarsi_pb2_grpc as pb_grpc  # noqa: E402

SPEC = """
name: python-toy
workload: {model: toy-1b, global_batch: 8, seq_len: 1024}
hardware: {gpu: H200, count: 1}
knobs:
  mbs: [1, 2, 4, 8]
  attn: [math, sdpa]
  ckpt: [false, true]
baseline: {mbs: 1, attn: math, ckpt: false}
budget: {max_trials: 6}
doctor: {repeats: 3}
verify: {candidates: 1, runs: 2}
seed: 3
executor:
  replay: {landscape: /data/land.jsonl}
"""


def outcome(a):
    """The agent's measurement of trial `a`: a toy landscape. Every step
    reports what the contract needs (step, loss, tokens, step time, peak
    memory, warm-up); times carry a little noise, as real timers do (runs
    that agree to the last digit are treated as forged)."""
    c = a.config
    mbs = int(c["mbs"])
    if mbs == 8 and c["ckpt"] == "false":
        return pb.TrialOutcome(status="oom", error="CUDA out of memory", wall_s=1.0)
    jitter = 1.0 + 1e-4 * (((a.trial_id * 37 + a.attempt) % 11) - 5)
    t = (0.5 if c["attn"] == "sdpa" else 1.0) / (1.0 + 0.2 * mbs) * (1.3 if c["ckpt"] == "true" else 1.0) * jitter
    o = pb.TrialOutcome(status="ok", wall_s=12.0)
    for s in range(3):
        o.steps.add(step=s, loss=5.0 - 0.1 * s, tokens=8192, step_time_s=9.0 if s == 0 else t,
                    warmup=(s == 0), peak_mem_gib=10.0 * mbs)
    return o


def agent(target, stop, ran):
    """The agent's duties, from the proto's comments: register, heartbeat,
    long-poll for a lease, report progress, complete, deregister on exit."""
    stub = pb_grpc.AgentServiceStub(grpc.insecure_channel(target))
    reg = stub.RegisterAgent(pb.RegisterAgentRequest(
        host="py-agent", gpu_model="H200", gpu_count=1, memory_per_gpu_gib=141,
        executors=["replay"]), timeout=10)
    while not stop.is_set():
        stub.Heartbeat(pb.HeartbeatRequest(agent_id=reg.agent_id), timeout=10)
        resp = stub.LeaseTrial(pb.LeaseTrialRequest(agent_id=reg.agent_id, wait_ms=500), timeout=10)
        if not resp.HasField("trial"):
            continue
        a = resp.trial
        o = outcome(a)
        if o.steps:  # progress as it goes, the rest with the completion
            stub.ReportProgress(pb.ReportProgressRequest(
                trial_id=a.trial_id, lease_token=a.lease_token, agent_id=reg.agent_id,
                steps=o.steps[:1]), timeout=10)
            del o.steps[:1]
        done = stub.CompleteTrial(pb.CompleteTrialRequest(
            trial_id=a.trial_id, lease_token=a.lease_token, agent_id=reg.agent_id, outcome=o),
            timeout=10)
        assert done.accepted, done
        ran.append(a.trial_id)
    stub.DeregisterAgent(pb.DeregisterAgentRequest(agent_id=reg.agent_id), timeout=10)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen(
            [server_bin, "--listen", "127.0.0.1:0", "--db", os.path.join(tmp, "db")],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            line = server.stdout.readline()
            assert line.startswith("infrarsi-server listening on "), line
            target = line.split()[-1]
            stop, ran = threading.Event(), []
            worker = threading.Thread(target=agent, args=(target, stop, ran))
            worker.start()
            try:
                c = infrarsi_client.Client(target)
                s = c.create(SPEC, files={"executor.replay.landscape": b'{"meta": {}}\n'})
                started = c.doctor(s.session_id)
                doctored = c.wait(s.session_id, after_seq=started.last_event_seq, timeout_s=60)
                assert doctored.stage == pb.STAGE_DOCTORED, doctored
                started = c.run(s.session_id)
                seen = []
                for ev in c.watch(s.session_id, after_seq=started.last_event_seq, timeout_s=120):
                    seen.append(ev.kind)
                final = c.get(s.session_id)
                assert final.stage == pb.STAGE_SEARCHED, final
                assert "trial_finished" in seen, seen
                rep = c.report(s.session_id)
                assert rep.verification.promoted_rank > 0, rep.verification.summary
                assert rep.best.step_time_s < rep.baseline.step_time_s, rep
                bank = c.query_bank(purpose="search", page_size=100)
                assert len(bank.entries) == final.trials_done, (len(bank.entries), final.trials_done)
                agents = c.list_agents()
                assert [a.host for a in agents.agents] == ["py-agent"], agents
                try:
                    c.query_bank(status="great")
                    raise AssertionError("a bad filter was accepted")
                except grpc.RpcError as e:
                    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
                    assert e.details().startswith("status:"), e.details()
            finally:
                stop.set()
                worker.join()
            gone = infrarsi_client.Client(target).list_agents(include_gone=True)
            assert gone.agents[0].state == "gone", gone
            print("python agent ran %d trials; session searched, %.2fx promoted" %
                  (len(ran), rep.baseline.step_time_s / rep.best.step_time_s))
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
