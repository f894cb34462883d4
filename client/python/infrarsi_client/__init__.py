"""A thin Python client for infrarsi-server, over the generated gRPC stubs.

    import infrarsi_client
    c = infrarsi_client.Client("central:7420", token=open("team.token").read().strip())
    s = c.create(open("job.yaml").read(), files={"executor.replay.landscape": data})
    c.doctor(s.session_id)
    c.wait(s.session_id)                    # until the doctor is done
    c.run(s.session_id)
    for ev in c.watch(s.session_id):        # every event until it finishes
        print(ev.kind, ev.trial.id, ev.session.stage_name)
    print(c.report(s.session_id).verification.summary)

The stubs come from client/python/gen_stubs.sh; put its output folder and
client/python on sys.path (or PYTHONPATH). Errors are grpc.RpcError, whose
details() names the field at fault.
"""

import grpc

from infrarsi.v1 import infrarsi_pb2 as pb
from infrarsi.v1 import infrarsi_pb2_grpc as pb_grpc

__all__ = ["Client", "pb", "pb_grpc", "FINISHED_STAGES"]

# Nothing more happens to a session in these stages by itself.
FINISHED_STAGES = (pb.STAGE_SEARCHED, pb.STAGE_APPLIED, pb.STAGE_CANCELLED, pb.STAGE_FAILED)


class Client:
    """One server. Thread-safe as gRPC channels are."""

    def __init__(self, target, token=None, root_certificates=None, timeout_s=30.0):
        if root_certificates is not None:
            creds = grpc.ssl_channel_credentials(root_certificates=root_certificates)
            self.channel = grpc.secure_channel(target, creds)
        else:
            self.channel = grpc.insecure_channel(target)
        self._md = [("authorization", "Bearer " + token)] if token else []
        self._timeout = timeout_s
        self.sessions = pb_grpc.SessionServiceStub(self.channel)
        self.bank = pb_grpc.BankServiceStub(self.channel)

    def _call(self, method, request):
        return method(request, metadata=self._md, timeout=self._timeout)

    def create(self, spec_yaml, files=None, spec_dir=""):
        """Init: `files` maps each spec field naming a file to its bytes."""
        req = pb.InitRequest(spec_yaml=spec_yaml, spec_dir=spec_dir)
        for field, content in (files or {}).items():
            if isinstance(content, str):
                content = content.encode()
            req.files.add(field=field, content=content)
        return self._call(self.sessions.Init, req)

    def doctor(self, session_id, repeats=0):
        return self._call(self.sessions.Doctor, pb.DoctorRequest(session_id=session_id, repeats=repeats))

    def run(self, session_id, max_trials=0):
        return self._call(self.sessions.Run, pb.RunRequest(session_id=session_id, max_trials=max_trials))

    def get(self, session_id):
        return self._call(self.sessions.GetSession, pb.GetSessionRequest(session_id=session_id))

    def report(self, session_id):
        return self._call(self.sessions.Report, pb.ReportRequest(session_id=session_id))

    def cancel(self, session_id):
        return self._call(self.sessions.CancelSession, pb.CancelSessionRequest(session_id=session_id))

    def list_agents(self, include_gone=False):
        return self._call(self.sessions.ListAgents, pb.ListAgentsRequest(include_gone=include_gone))

    def query_bank(self, **filters):
        """QueryExperience; keyword arguments are QueryExperienceRequest's fields."""
        return self._call(self.bank.QueryExperience, pb.QueryExperienceRequest(**filters))

    def watch(self, session_id, after_seq=0, timeout_s=3600.0):
        """Yields the session's events after `after_seq` (0: a snapshot first)
        until it has finished (the server ends the stream)."""
        stream = self.sessions.WatchSession(
            pb.WatchSessionRequest(session_id=session_id, after_seq=after_seq),
            metadata=self._md, timeout=timeout_s)
        try:
            for ev in stream:
                yield ev
        finally:
            stream.cancel()  # a caller that stops early ends the stream too

    def wait(self, session_id, after_seq=0, timeout_s=3600.0):
        """Watches until the session leaves its current stage's work (doctoring,
        running, verifying) and returns its summary."""
        busy = (pb.STAGE_DOCTORING, pb.STAGE_RUNNING, pb.STAGE_VERIFYING)
        last = None
        for ev in self.watch(session_id, after_seq, timeout_s):
            last = ev.session
            if last.stage not in busy:
                break
        return last if last is not None else self.get(session_id)
