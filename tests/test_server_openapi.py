"""The Studio API fuzzed from its own OpenAPI document (schemathesis).

Every operation the document declares is called with inputs generated from
its schema, valid and invalid: no answer may be a 5xx, every answer must
match the document (status code declared, body of the declared shape, JSON
error bodies for 4xx). The app serves the test graphs on a fresh SQLite store
(the routes are the same whatever the backend; the backend suites cover the
stores).
"""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import negative_data_rejection, positive_data_acceptance  # noqa: E402

import graphtape  # noqa: E402
from graphtape.server.studio import create_app  # noqa: E402
from tests.studio_graphs import studio_graphs  # noqa: E402

#: where the app's store lives for this module (a temporary folder made by the lazy loader below)
_state: dict[str, object] = {}


def _app():
    import tempfile

    folder = tempfile.TemporaryDirectory(prefix="graphtape-openapi-")
    _state["folder"] = folder
    tape = graphtape.connect(f"sqlite:///{folder.name}/tape.db")
    _state["tape"] = tape
    # in process, schemathesis calls the app at the host name "testserver"
    return create_app(
        tape, studio_graphs(), max_body_bytes=256 * 1024, heartbeat_seconds=1.0, allowed_hosts=["testserver"]
    )


# a tape file upload is bytes whichever of its two types it is sent as
schemathesis.serializer.alias("application/x-ndjson", "application/octet-stream")
schema = schemathesis.openapi.from_asgi("/openapi.json", _app())


@pytest.fixture(scope="module", autouse=True)
def _cleanup():
    yield
    tape = _state.pop("tape", None)
    if tape is not None:
        tape.close()  # type: ignore[attr-defined]
    folder = _state.pop("folder", None)
    if folder is not None:
        folder.cleanup()  # type: ignore[attr-defined]


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_error_and_answers_match_the_document(case):
    response = case.call(timeout=20)
    assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.status_code} {response.text}"
    # negative data accepted is not a failure here: pydantic's lax mode reads `false` as 0 and "1" as 1,
    # as LangGraph's own server does; everything about the answers is checked
    case.validate_response(response, excluded_checks=[negative_data_rejection, positive_data_acceptance])
