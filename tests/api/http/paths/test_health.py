def test_live(client):
    assert client.get("/health").json() == {"status": "live"}


def test_ready_when_triton_is_up_and_not_saturated(client):
    response = client.get("/health/ready")
    assert response.status_code == 200 and response.json() == {"status": "ready"}


def test_busy_when_saturated(client, gateway):
    gateway.busy = True
    response = client.get("/health/ready")
    assert response.status_code == 503
    assert response.json()["status"] == "busy"
    assert response.headers["retry-after"] == "1"


def test_unavailable_when_triton_is_down(client, gateway):
    gateway.ready = False
    response = client.get("/health/ready")
    assert response.status_code == 503 and response.json()["status"] == "unavailable"


def test_docs_are_served(client):
    assert client.get("/docs").status_code == 200
    assert "/infer" in client.get("/openapi.json").json()["paths"]
