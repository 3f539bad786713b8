"""A ``lingtest review`` session recorded as a Prefect flow run (``lingtest.flows.review_session``) on
the test session's Prefect server: two suggestions filed, the run's artifact lists both,
and the run is Completed once the app stops. An unreachable API costs one warning; the
session works on."""
from __future__ import annotations

import time

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from prefect.settings import PREFECT_API_URL, temporary_settings
from test_adaptive_review_app import completions, hotel_copy, session_on  # noqa: F401
from test_ui_server import free_port

from lingtest.flows.review_session import SessionRecorder
from lingtest.tasks.adaptive.review_app.record import session_changes
from lingtest.tasks.adaptive.tree import read_tree

WAIT_S = 60


def latest_artifact(key: str, flow_run_id) -> str:
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=[key])))
    mine = [a for a in found if str(a.flow_run_id) == str(flow_run_id)]
    return max(mine, key=lambda a: a.created).data if mine else ""


def wait_for(check, what: str):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {WAIT_S} s")


def test_a_review_session_is_a_completed_flow_run_listing_what_was_filed(
        prefect_harness, hotel_copy, completions):  # noqa: F811
    session = session_on(hotel_copy, completions)
    warnings: list[str] = []
    recorder = SessionRecorder(session, every_s=0.2, warn=warnings.append).start()
    session.suggest("/Rooms")
    first, second = session.view("/Rooms")["suggestions"][:2]
    session.accept("/Rooms", first["sid"], "fail")
    session.accept("/Rooms", second["sid"], "off_topic", text="A quiet room, sort of")
    assert recorder.running.wait(WAIT_S), warnings
    run_id = recorder.flow_run_id
    # while the app runs: the run exists, is Running, and its artifact catches up
    shown = wait_for(lambda: (lambda md: "**2** accepted" in md and md)(
        latest_artifact("review-hotel", run_id)), "the artifact listing two accepted rows")
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(run_id)
    assert run.state.is_running()
    assert run.name.startswith("hotel.csv-ada-") and len(run.name) == len("hotel.csv-ada-") + 15
    assert {"review", "tree:hotel.csv", "reviewer:ada"} <= set(run.tags)

    assert recorder.stop(WAIT_S)
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(run_id)
    assert run.state.is_completed(), run.state
    final = latest_artifact("review-hotel", run_id)
    for text in (first["input"], "A quiet room, sort of", second["input"]):  # edited_from too
        assert text in final, final
    assert "| fail " in final and "| off_topic " in final and "openai:gpt-test" in final
    assert "**2** accepted · **0** written" in final and shown
    assert warnings == []


def test_net_changes_count_moves_deletes_and_forget_what_was_undone(
        hotel_copy, completions):  # noqa: F811
    session = session_on(hotel_copy, completions)
    start = session.tree
    written = session.add_test("/Rooms", "The bathroom was disgusting", "fail")
    session.move("02076434c5fc4a389f127e542c479c64", "/Service")
    session.create_topic("/Rooms", "Beds")
    session.add_test("/Rooms", "Noisy room", "pass")
    session.undo()
    counts, rows = session_changes(start, read_tree(hotel_copy))
    assert counts == {"accepted": 0, "written": 1, "relabelled": 0, "moved": 1, "deleted": 0,
                      "topics created": 1, "topics deleted": 0}
    assert list(rows["input"]) == ["The bathroom was disgusting"]
    assert rows.loc[0, "source"] == "written" and rows.loc[0, "verdict"] == "fail"
    session.delete(written)
    session.delete_topic("/Rooms")
    counts, _ = session_changes(start, session.tree)
    assert counts["written"] == 0 and counts["topics deleted"] == 1
    # /Rooms held 48 rows: its marker (a topic deleted) and the moved test are not counted
    assert counts["deleted"] == (start.frame["topic"] == "/Rooms").sum() - 2


def test_an_unreachable_prefect_api_is_one_warning_and_the_app_works_on(
        hotel_copy, completions):  # noqa: F811
    session = session_on(hotel_copy, completions)
    warnings: list[str] = []
    started = time.monotonic()
    with temporary_settings({PREFECT_API_URL: f"http://127.0.0.1:{free_port()}/api"}):
        recorder = SessionRecorder(session, warn=warnings.append).start()
    session.add_test("/Rooms", "The bathroom was disgusting", "fail")
    assert recorder.stop(WAIT_S), "the recorder thread did not end"
    print(f"unreachable API noticed in {time.monotonic() - started:.1f} s")
    assert len(warnings) == 1 and "not recorded in Prefect" in warnings[0], warnings
    assert recorder.flow_run_id is None
    assert "The bathroom was disgusting" in set(read_tree(hotel_copy).frame["input"])
