"""Instances from one joined row (claw_platform.raw_rows): what the ORM would give."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from agents.actions.conversation import do_create_session
from agents.actions.runs import do_send_message
from agents.models import Session, Turn
from claw_platform.raw_rows import instances, select_list

pytestmark = pytest.mark.django_db


def _read(session_id, turn_id):
    user = get_user_model()
    sql = (
        f"SELECT {select_list(('s', Session), ('u', user), ('t', Turn))} FROM agents_session s "
        f"LEFT JOIN {user._meta.db_table} u ON u.id = s.user_id JOIN agents_turn t ON t.id = %s WHERE s.id = %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [turn_id, session_id])
        return instances(cursor.fetchone(), Session, user, Turn)


def test_a_joined_row_gives_the_instances_the_orm_gives(live_agent):
    session = do_create_session(live_agent.agent, user=live_agent.member, title="rows")
    run = do_send_message(session, "hello", acting_user=live_agent.member)
    Turn._base_manager.filter(pk=run.turn_id).update(
        pending_step={"assistant": {"role": "assistant", "parts": []}}
    )

    got_session, got_user, got_turn = _read(session.pk, run.turn_id)

    want_turn = Turn._base_manager.get(pk=run.turn_id)
    assert got_turn.pending_step == {"assistant": {"role": "assistant", "parts": []}}  # JSON, decoded
    for field in Turn._meta.concrete_fields:
        assert getattr(got_turn, field.attname) == getattr(want_turn, field.attname), field.name
    want_session = Session._base_manager.get(pk=session.pk)
    for field in Session._meta.concrete_fields:
        assert getattr(got_session, field.attname) == getattr(want_session, field.attname), field.name
    assert got_user.pk == live_agent.member.pk
    assert not got_session._state.adding  # saved rows
    assert not got_turn._state.adding


def test_an_outer_join_that_found_nothing_is_none(live_agent):
    session = do_create_session(live_agent.agent, user=None, title="no user")
    run = do_send_message(session, "hello", acting_user=None)

    got_session, got_user, got_turn = _read(session.pk, run.turn_id)

    assert got_user is None
    assert got_session.user_id is None
    assert got_turn.pk == run.turn_id


def test_a_row_of_another_shape_is_refused(live_agent):
    session = do_create_session(live_agent.agent, user=live_agent.member, title="shape")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {select_list(('s', Session))}, 1 FROM agents_session s WHERE s.id = %s", [session.pk]
        )
        row = cursor.fetchone()
    with pytest.raises(ValueError, match="columns"):
        instances(row, Session)
