"""The provider keys examples/local.json names, as `make run` and `make cluster` set them: the
scripted provider takes any key, but a Codex key must look like one (a ChatGPT sign-in token: a
JWT whose auth claim names the account, unsigned here)."""

DEMO_CODEX_KEY = (
    "eyJhbGciOiJub25lIn0.eyJodHRwczovL2FwaS5vcGVuYWkuY29tL2F1dGgiOnsiY2hhdGdwdF9hY2NvdW50X2lkIjoiZGVtbyJ9fQ.demo"
)
DEMO_PROVIDER_KEYS = {"SCRIPTED_PROVIDER_KEY": "scripted-demo-key", "SCRIPTED_CODEX_KEY": DEMO_CODEX_KEY}
