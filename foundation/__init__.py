"""The shared floor under the apps: errors, logs, the principal, wire types, telemetry, the host
config model, tool schemas, REST templates and the request → application object accessor.
Imports no app and not `brainsite`; every app may import it."""

from .deferred_grammar import defer_rfc3987_grammar

defer_rfc3987_grammar()  # before any import of jsonschema (see the module)
