"""Tenant-scoped text storage (`list`, `read`, `write`, `delete`) on S3, R2, GCS or a directory,
through Django's storage API. Keys live under `<prefix>/<base64url tenant>/`; the tenant comes
from the trusted call identity only. Imports none of the server's apps."""
