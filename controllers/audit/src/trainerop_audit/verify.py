"""Verify the audit trail's seals (docs/audit.md): ``python -m trainerop_audit.verify [-n NAMESPACE]``.

Reads every AuditLog (of one namespace, or all) with your kubeconfig (or in-cluster credentials)
and reports, per namespace, whether the trail is intact — every sealed record there and unchanged,
the seals an unbroken chain, no record older than the newest seal left out of it — or the first
broken link. Exit code 0: intact; 1: a link is broken; 2: the trail could not be read.
"""

import argparse
import sys
from collections.abc import Sequence

from lightkube import ApiError, Client
from lightkube.core.exceptions import ConfigError

from trainerop_common.kube import LIST_PAGE, RESOURCES

from .seal import verify


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-n", "--namespace", default="*", help="one namespace (default: all)")
    args = parser.parse_args(argv)
    try:
        client = Client()
        print("reading the audit records ...", file=sys.stderr, flush=True)
        listed = client.list(RESOURCES["AuditLog"], namespace=args.namespace, chunk_size=LIST_PAGE)
        records = [o.to_dict() for o in listed]
    except ConfigError as err:
        print(f"no cluster to read: {err}; set KUBECONFIG or run in a pod", file=sys.stderr)
        return 2
    except ApiError as err:
        print(f"the AuditLogs could not be read: {err.status.message} (you need list on auditlogs)", file=sys.stderr)
        return 2
    verdicts = verify(records)
    for verdict in verdicts:
        print(verdict.line())
    if not verdicts:
        print("no audit records")
    return 1 if any(v.broken for v in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
