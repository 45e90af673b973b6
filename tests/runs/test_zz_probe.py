import psycopg, threading
import pytest
from agents.actions.conversation import do_create_session
from agents.actions.runs import do_send_message
from agents.runtime.worker import execute_run
from tests.fakes.fake_llm import Turn as FakeTurn

pytestmark = pytest.mark.django_db(transaction=True)

def test_probe(live_agent, fake_llm, monkeypatch):
    s = do_create_session(live_agent.agent, user=live_agent.member, title="x")
    fake_llm.script(FakeTurn(text="Hello there."), FakeTurn(text="Again."))
    run = do_send_message(s, "warm", acting_user=live_agent.member)
    assert execute_run(run.pk, wait=True) == "completed"
    log = []
    real = psycopg.Cursor.execute
    import traceback
    def ex(self, query, params=None, **kw):
        if "extensionsversion" in str(query) or "tenancy_membership" in str(query) or "toolapprovalgrant" in str(query):
            log.append(("stack", "", " <- ".join(f"{f.name}:{f.filename.split('/')[-1]}" for f in traceback.extract_stack()[-14:-3][::-1])))
        log.append(("sync", threading.current_thread().name, str(query)[:150].replace("\n", " ")))
        return real(self, query, params, **kw)
    areal = psycopg.AsyncCursor.execute
    async def aex(self, query, params=None, **kw):
        log.append(("async", threading.current_thread().name, str(query)[:150].replace("\n", " ")))
        return await areal(self, query, params, **kw)
    monkeypatch.setattr(psycopg.Cursor, "execute", ex)
    monkeypatch.setattr(psycopg.AsyncCursor, "execute", aex)
    run = do_send_message(s, "second", acting_user=live_agent.member)
    log.append(("--", "", "message sent"))
    assert execute_run(run.pk, wait=True) == "completed"
    with open("/tmp/probe/stmts.txt", "w") as f:
        for k, t, q in log:
            f.write(f"{k:5} {t[:20]:20} {q}\n")
