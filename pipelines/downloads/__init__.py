"""Public resources downloaded by `odqa fetch`: the registry of what there is, the HTTP transfer
that resumes and retries, checksums, and unpacking. Paths come from `storage.downloads`."""
