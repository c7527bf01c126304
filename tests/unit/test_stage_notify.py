"""`cutover stage` announces itself: the real stage (CLI, Ansible on the local host) sends the `stage` event to
the webhook of the config's notify section."""

import yaml

from cutover import notify
from receiver import Receiver


def test_stage_sends_its_event_to_the_configured_webhook(invoke, local_inventory, release, tmp_path):
    receiver = Receiver()
    try:
        config = tmp_path / "config.yml"
        config.write_text(yaml.safe_dump({"notify": {"targets": [{"kind": "webhook", "url": f"{receiver.url}/h"}],
                                                     "timeout_s": 5}}))
        result = invoke("--config", config, "stage", "-i", local_inventory, "--release", release)
        assert result.exit_code == 0, result.stderr
        assert notify.flush(10)
        [event] = receiver.events("/h")
        assert event["event"] == "stage" and event["release_id"] == release.name
        assert event["hosts"] == {"local": "staged"} and event["operator"] == "alice@test"
        assert event["summary"] == f"release {release.name} staged: local staged"
    finally:
        receiver.close()
