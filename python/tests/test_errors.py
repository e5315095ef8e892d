"""What could not be answered raises, as the kind of error it is."""

import sqlite3

import pytest

import baton


def test_an_unavailable_store_raises_and_grants_nothing():
    a = baton.authority_for("memory:?fault=unavailable")
    with pytest.raises(baton.Unavailable) as e:
        a.claim("t", "w1")
    assert e.value.kind == "unavailable"
    assert isinstance(e.value, baton.Error)


def test_a_write_whose_answer_was_lost_is_indeterminate():
    a = baton.authority_for("memory:?fault=indeterminate")
    with pytest.raises(baton.Indeterminate) as e:
        a.claim("t", "w1")
    assert e.value.kind == "indeterminate"
    assert not isinstance(e.value, baton.Unavailable)


def test_a_file_that_is_not_a_baton_store_is_corrupt(tmp_path):
    path = tmp_path / "foreign.db"
    c = sqlite3.connect(path)
    c.execute("create table tasks (name text)")
    c.execute("create table meta (k text, v text)")
    c.commit()
    c.close()
    with pytest.raises(baton.Unavailable) as e:
        baton.authority_for(f"sqlite:{path}").claim("t", "w")
    assert e.value.kind in ("corrupt", "unsupported"), e.value
    assert isinstance(e.value, (baton.Corrupt, baton.Unsupported))


def test_garbage_is_corrupt(tmp_path):
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database file at all" * 200)
    with pytest.raises(baton.Corrupt):
        baton.authority_for(f"sqlite:{path}").claim("t", "w")


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda a: a.claim("", "w"), "task"),
        (lambda a: a.claim("t", "bad owner\n"), "owner"),
        (lambda a: a.claim("t", "w", ttl=-1), "ttl"),
        (lambda a: a.claim("t", "w", ttl="soon"), "ttl"),
        (lambda a: a.claim("t", "w", ttl=float("nan")), "ttl"),
        (lambda a: a.claim("t", "w", ttl=10**9), "ttl"),
        (lambda a: a.list("NOT_A_STATE"), "state"),
        (lambda a: a.ack(["not-an-intent-id"]), "intent_id"),
        (lambda a: a.fail("t", "w", 1, {"x": object()}), "error"),
        (lambda a: a.declare({"task_id": "t"}), "executor"),
        (lambda a: a.declare("{not json"), "manifest"),
        (lambda a: a.add("t", after=["t"]), "depends_on"),
        (lambda a: a.events(after="x"), "after"),
        (lambda a: a.verify("t", 0), "fence"),
        # Core reads these; each error names the argument as Python spells it.
        (lambda a: a.register("t", ""), "run_id"),
        (lambda a: a.add("t", max_attempts=2, backoff_max=10**9), "backoff_max"),
        (lambda a: a.cancel("t", "w", 1, force=True), "force"),
    ],
)
def test_bad_input_names_its_field_and_changes_nothing(auth, call, field):
    with pytest.raises(baton.InvalidInput) as e:
        call(auth)
    assert e.value.field == field, e.value
    assert e.value.kind == "invalid"
    assert len(auth.list()) == 0 and len(auth.events()) == 0


def test_a_bad_url_names_the_store_field():
    with pytest.raises(baton.InvalidInput) as e:
        baton.authority_for("nosuch:thing")
    assert e.value.field == "store"


def test_an_unreachable_server_is_unavailable():
    # Port 9 on loopback: nothing listens there.
    with pytest.raises(baton.Unavailable):
        baton.authority_for("http://127.0.0.1:9").claim("t", "w")


def test_a_missing_folder_fails_at_authority_for(tmp_path):
    missing = tmp_path / "no" / "such" / "baton.db"
    with pytest.raises(baton.InvalidInput) as e:
        baton.authority_for(f"sqlite:{missing}")
    assert e.value.field == "store"
    assert "no such folder" in str(e.value)
    assert not (tmp_path / "no").exists()
