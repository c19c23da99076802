"""Tools that act in the world (web, storage, sandboxes): one implementation per capability,
served by Brain's installed providers and by the standalone tool services (`services/`). No
server app is imported here: a tool service runs without Brain."""
