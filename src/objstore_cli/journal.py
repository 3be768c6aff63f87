"""Keys and the journal (docs/JOURNAL.md): the ``key`` and ``journal`` groups.

Every write here signs as the caller's key (--key, env OBJSTORE_KEY, default the owner key made by
`objstore init`) and goes through a journal Host: the in-process one, or with --socket the Backend Host
served by `objstore journal-serve`. The Host decides; these commands only print.
"""

from __future__ import annotations

import json

import click

from .output import JsonGroup, echo_json
from .params import RUN, caller_key, journal_host, json_option, key_option, pass_ctx, socket_option


def _record_arg(value):
    """--reflects-through / --checkpoint: 'none' is None; anything else goes to J.resolve_record."""
    return None if value is None or value.lower() == "none" else value


def _scope_args(run, subject):
    if (run is None) == (subject is None):
        raise click.UsageError("name exactly one of RUN or --subject SUBJECT")
    return run, subject


def _scope_text(run, subject):
    return f"run {run}" if run is not None else f"subject {subject}"


@click.group("key", cls=JsonGroup)
def key_group():
    """ed25519 keys: make a worker's or job's key pair, show a key's public half.

    Private keys live outside the store; the store only ever holds public keys
    (the owner's, and the grantees' named in grants).

    \b
    Examples:
      objstore key new ./worker.key
      objstore key show ./worker.key
    """


@key_group.command("new")
@click.argument("path", metavar="FILE")
@json_option
def key_new(path, as_json):
    """Generate an ed25519 key: FILE (private, mode 0600) and FILE.pub; print the public key.

    \b
    Arguments:
      FILE  where to write the private key (FILE.pub gets the public key)

    \b
    Examples:
      objstore key new ./worker.key     # then: journal grant RUN --pubkey ./worker.key.pub
    """
    import os

    from objstore.storage import identity

    k = identity.generate()
    identity.save_key(path, k)
    full = os.path.abspath(path)
    if as_json:
        echo_json({"private_key": full, "public_key_file": full + ".pub", "public": k.public})
        return
    click.echo(k.public)


@key_group.command("show")
@click.argument("path", metavar="FILE")
@json_option
def key_show(path, as_json):
    """Print the public key (64 hex digits) of a private or public key FILE.

    \b
    Arguments:
      FILE  a private key (PEM) or a public key file

    \b
    Examples:
      objstore key show ~/.config/objstore/keys/owner.key
    """
    import os

    from objstore.storage import identity

    public = identity.load_public(path)
    if as_json:
        echo_json({"file": os.path.abspath(path), "public": public})
        return
    click.echo(public)


@click.group(cls=JsonGroup)
def journal():
    """A session's journal: show, update, enable/disable, grants.

    Writes are signed requests to a journal Host: --key FILE (env OBJSTORE_KEY,
    default the owner key) and, with --socket PATH, the Backend Host of
    'objstore journal-serve'. The Host decides from the signature and the
    owner-signed grants; a key without a live write grant is refused (exit 8).

    \b
    Examples:
      objstore key new w.key
      objstore journal grant RUN --pubkey w.key.pub --name w1
      echo '{"entries": []}' | objstore journal update RUN - --reflects-through latest --key w.key
    """


@journal.command("show")
@click.argument("run", type=RUN)
@json_option
@pass_ctx
def journal_show(c, run, as_json):
    """Show the newest journal version of RUN (reads the store; no Host, no key).

    \b
    Arguments:
      RUN  the session (a run): id, unique prefix or 'latest'

    \b
    Examples:
      objstore journal show RUN --json
    """
    from objstore import journal as J

    v = J.show(c.log(), run)
    if as_json:
        echo_json(v)
        return
    click.echo(f"journal {v['id'].hex()}  version {v['version']}  {'enabled' if v['enabled'] else 'DISABLED'}")
    if "source_end" in v:
        click.echo(f"legacy version: source_end {v['source_end']}  checkpoint {v['checkpoint']}  writer {v['writer']}")
    else:
        rt = v["reflects_through"].hex() if v["reflects_through"] else "none"
        cp = v["checkpoint"].hex() if isinstance(v["checkpoint"], bytes) else "none"
        click.echo(f"reflects_through {rt}  checkpoint {cp}")
        click.echo(f"writer {v['writer']}")
    click.echo(f"body sha256 {v['body_sha256']}")
    click.echo(json.dumps(v["body"], indent=2, sort_keys=True, ensure_ascii=False))


def _print_version(run, jid, ver, as_json, what="is now"):
    if as_json:
        echo_json({"run": run, "journal": jid, "version": ver})
    else:
        click.echo(f"journal of {run} {what} version {ver} ({jid.hex()[:12]})")


@journal.command("update")
@click.argument("run", type=RUN)
@click.argument("source", metavar="FILE|-", type=click.File("rb"))
@click.option("--reflects-through", "reflects_through", required=True, metavar="ID|latest|none",
              help="The record this version reflects through (with its ancestors): a record id or unique prefix, "
                   "'latest' (the live head), or 'none'.")
@click.option("--checkpoint", metavar="ID|latest", default=None, help="Processing checkpoint record (id, prefix or 'latest'); default none.")
@key_option
@socket_option
@json_option
@pass_ctx
def journal_update(c, run, source, reflects_through, checkpoint, key_file, socket_path, as_json):
    """Write the next journal version of RUN from a JSON object in FILE (or - for stdin).

    The request is signed by --key over the body and the journal head seen now;
    if another version lands first the update is a conflict (exit 7).

    \b
    Arguments:
      RUN  the session (a run): id, unique prefix or 'latest'
      FILE|-  the JSON object of the new body, or - to read standard input

    \b
    Examples:
      objstore journal update RUN notes.json --reflects-through latest --key w.key
    """
    from objstore import journal as J

    body = J.parse_body(source.read())
    log = c.log()
    key = caller_key(key_file, log)
    jid, ver = J.update_journal(log, run, key, body, reflects_through=_record_arg(reflects_through),
                                checkpoint=_record_arg(checkpoint), host=journal_host(log, socket_path))
    _print_version(run, jid, ver, as_json)


def _enable_cmd(c, run, enabled, key_file, socket_path, as_json):
    from objstore import journal as J

    log = c.log()
    key = caller_key(key_file, log)
    jid, ver = J.set_journal_enabled(log, run, key, enabled, host=journal_host(log, socket_path))
    if as_json:
        echo_json({"run": run, "journal": jid, "version": ver, "enabled": enabled})
    else:
        click.echo(f"journal of {run} {'enabled' if enabled else 'disabled'} (version {ver}, {jid.hex()[:12]})")


@journal.command("enable")
@click.argument("run", type=RUN)
@key_option
@socket_option
@json_option
@pass_ctx
def journal_enable(c, run, key_file, socket_path, as_json):
    """Enable RUN's journal: a new version with the same body and reflection.

    \b
    Arguments:
      RUN  the session (a run): id, unique prefix or 'latest'

    \b
    Examples:
      objstore journal enable RUN
    """
    _enable_cmd(c, run, True, key_file, socket_path, as_json)


@journal.command("disable")
@click.argument("run", type=RUN)
@key_option
@socket_option
@json_option
@pass_ctx
def journal_disable(c, run, key_file, socket_path, as_json):
    """Disable RUN's journal (reads then answer outcome 'disabled').

    \b
    Arguments:
      RUN  the session (a run): id, unique prefix or 'latest'

    \b
    Examples:
      objstore journal disable RUN --key w.key
    """
    _enable_cmd(c, run, False, key_file, socket_path, as_json)


@journal.command("grant")
@click.argument("run", type=RUN, required=False)
@click.option("--subject", default=None, help="Grant on every session of SUBJECT instead of one RUN.")
@click.option("--pubkey", "pubkey_file", required=True, metavar="FILE", help="The grantee's public key (PEM or 64 hex digits; a private key file gives its public half).")
@click.option("--role", type=click.Choice(["worker", "job"]), default=None, help="worker (default) or job; jobs are refused every journal read and write.")
@click.option("--read-only", is_flag=True, help="Grant read only (default read and write).")
@click.option("--delete", "may_delete", is_flag=True, help="Also grant 'delete': the key may sign recorded deletions of RUN (or of the subject's runs): 'objstore delete'.")
@click.option("--name", default="", help="A label for the grantee in messages (never used to decide anything).")
@click.option("--reason", default="", help="Why; recorded in the grant.")
@click.option("--supersedes", "supersedes_file", metavar="OLDPUBFILE", default=None,
              help="A new worker takes over: revoke this old key and grant --pubkey, in one commit.")
@key_option
@json_option
@pass_ctx
def journal_grant(c, run, subject, pubkey_file, role, read_only, may_delete, name, reason, supersedes_file, key_file, as_json):
    """Grant a key rights on RUN's journal (or, with --subject, on every session of a subject).

    Grants are objects signed by the owner key (--key must be it; default it
    is) and only ever appended: a revocation or supersession is a new grant.

    \b
    Arguments:
      RUN  the session (a run) to grant on; omit it with --subject

    \b
    Examples:
      objstore journal grant RUN --pubkey w.key.pub --name w1
      objstore journal grant --subject alice --pubkey w.key.pub --read-only
      objstore journal grant RUN --pubkey w2.key.pub --supersedes w.key.pub
      objstore journal grant --subject alice --pubkey d.key.pub --delete
    """
    from objstore import journal as J
    from objstore.storage import identity

    run, subject = _scope_args(run, subject)
    if supersedes_file is not None and (role is not None or read_only or may_delete):
        raise click.UsageError("--supersedes grants the new key as a read-write worker; drop --role/--read-only/--delete")
    log = c.log()
    public = identity.load_public(pubkey_file)
    owner = caller_key(key_file, log)
    if supersedes_file is not None:
        old = identity.load_public(supersedes_file)
        rid, gid = J.supersede(log, owner, run, old, public, subject=subject, name=name, reason=reason)
        if as_json:
            echo_json({"run": run, "subject": subject, "grantee": public, "grant": gid, "superseded": old, "revocation": rid})
        else:
            click.echo(f"{name or public[:16] + '…'} supersedes {old[:16]}… on {_scope_text(run, subject)} "
                       f"(grant {gid.hex()[:12]}, revocation {rid.hex()[:12]})")
        return
    role = role or "worker"
    rights = ("read",) if read_only else ("read", "write")
    if may_delete:
        rights = ("delete", *rights)
    gid = J.grant(log, owner, run, public, subject=subject, role=role, rights=rights, name=name, reason=reason)
    if as_json:
        echo_json({"run": run, "subject": subject, "grantee": public, "grant": gid, "role": role, "rights": list(rights)})
    else:
        click.echo(f"granted {name or public[:16] + '…'} {','.join(rights)} as {role} on {_scope_text(run, subject)} (grant {gid.hex()[:12]})")


@journal.command("revoke")
@click.argument("run", type=RUN, required=False)
@click.option("--subject", default=None, help="Revoke a subject-wide grant instead of a RUN's.")
@click.option("--pubkey", "pubkey_file", required=True, metavar="FILE", help="The grantee's public key (PEM or 64 hex digits).")
@click.option("--reason", default="revoked", show_default=True, help="Why; recorded in the revocation.")
@key_option
@json_option
@pass_ctx
def journal_revoke(c, run, subject, pubkey_file, reason, key_file, as_json):
    """Revoke a key's grant on RUN (or --subject): a new signed grant; the old one stays.

    \b
    Arguments:
      RUN  the session (a run) whose grant to revoke; omit it with --subject

    \b
    Examples:
      objstore journal revoke RUN --pubkey w.key.pub --reason "worker retired"
    """
    from objstore import journal as J
    from objstore.storage import identity

    run, subject = _scope_args(run, subject)
    log = c.log()
    public = identity.load_public(pubkey_file)
    gid = J.revoke(log, caller_key(key_file, log), run, public, subject=subject, reason=reason)
    if as_json:
        echo_json({"run": run, "subject": subject, "grantee": public, "grant": gid, "action": "revoke", "reason": reason})
    else:
        click.echo(f"revoked {public[:16]}… on {_scope_text(run, subject)} (grant {gid.hex()[:12]})")


@journal.command("grants")
@click.argument("run", type=RUN)
@json_option
@pass_ctx
def journal_grants(c, run, as_json):
    """List the grants on RUN and on its subject, each key with its whole chain (oldest first).

    'signed' says whether the owner key signed a grant object, 'counts' whether the Host counts it
    (owner-signed and about this key and scope); 'effective' is the chain's state as the Host judges it.

    \b
    Arguments:
      RUN  the session (a run): id, unique prefix or 'latest'

    \b
    Examples:
      objstore journal grants RUN --json
    """
    from objstore import journal as J

    log = c.log()
    rows = J.LocalJournalHost(log).grant_table(run)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo(f"no grants on run {run} or subject {log.subject(run)}")
    for r in rows:
        eff = r["effective"]
        now = f"{eff['action']} {eff['role']} {','.join(eff['rights'] or [])}" if eff else "nothing (no counting grant)"
        click.echo(f"{r['grantee']}  ({r['scope']})  now: {now}")
        for g in r["chain"]:
            click.echo(f"  seq {g['seq']}  {g['action']:<6} {g['role']:<6} {','.join(g['rights'] or []):<10}  "
                       f"name {g['name']!r}  reason {g['reason']!r}  {g['id'].hex()[:12]}"
                       + ("" if g["counts"] else "  DOES NOT COUNT (not owner-signed, or not about this key/scope)"))
