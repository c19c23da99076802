"""The spec's resource tool service (`web_fetch`, `web_search`, `storage_*`) for operators who
run tools outside Brain. Each capability's handlers live in a module of their own."""
