"""``python -m runtime.serve upstream.base_url=http://127.0.0.1:8000/v1
gates.toolgate=checkpoints/toolgate/<run> gates.g_step=checkpoints/g_step/<run> host=127.0.0.1 port=8080``
(or ``upstream=local model=... gates.probe_prefill=...``: the policy in this process, Probe&Prefill included).

Loads the gates (their contracts checked against ``gates.policy`` when given, with ``upstream=local`` against the
local policy's fingerprint), then serves until stopped. Refuses to start on an address other machines can reach
unless API keys are set (``auth``). SIGHUP (or ``POST /admin/reload`` with the admin key) reloads the gates from
their checkpoints without stopping: requests in flight finish, none is refused."""
from __future__ import annotations

import logging
import signal
import threading

import hydra
import uvicorn
from omegaconf import DictConfig, OmegaConf

from data_builders.gates import gates as registered, gates_at
import runtime.serve.config  # noqa: F401 - its schemas, stored before Hydra composes
from recipes import CONFIG_DIR

from .app import create_app
from .auth import check_bind, is_loopback, load_api_keys
from .server import uvicorn_config
from .upstream import Upstream


def load_gates(cfg: DictConfig, policy: str | None = None):
    """The configured gates, or None when none is (the endpoint is then a plain proxy with the same limits)."""
    paths = {name: cfg.get(name) for name in registered()}
    if all(path is None for path in paths.values()):
        return None
    # why here: the runtime API loads torch, the controllers and the featurizers (MiniLM); a plain proxy and the
    # tests' injected gates do without them.
    from runtime.api import Gates

    # warmed up before the port opens: the first request must not wait seconds for the encoder to load
    return Gates.load(paths, policy=policy or cfg.policy, strict=cfg.strict,
                      taus={k: v for k, v in (cfg.get("taus") or {}).items() if v is not None},
                      support_z=dict(cfg.get("support_z") or {})).warmup()


def gate_loader(cfg: DictConfig, policy: str | None):
    """The gates a reload loads: the configured paths (reread: a promoted checkpoint behind the same path), each
    overridden by the reload's own (``{"<gate>": "checkpoints/<gate>/<run>"}``)."""
    def load(paths: dict | None = None):
        node = OmegaConf.merge(cfg.gates, paths) if paths else cfg.gates
        check_probe_upstream(cfg, node)
        return load_gates(node, policy=policy)
    return load


def check_probe_upstream(cfg: DictConfig, gates_cfg: DictConfig) -> None:
    if cfg.upstream.kind == "local":
        return
    for gate in gates_at("pre_generation"):
        if gates_cfg.get(gate.name) is not None:
            raise ValueError(f"gates.{gate.name} needs upstream=local: it reads the policy's hidden states, which an "
                             "HTTP upstream does not return")


def build(cfg: DictConfig):
    """(gates, upstream, the reload's gate loader) from the config: ``upstream=http`` proxies a server,
    ``upstream=local`` loads the policy."""
    if cfg.upstream.kind == "local":
        # why here: upstream=local loads a policy (transformers, maybe vLLM); upstream=http never does
        from .local import LocalUpstream

        upstream = LocalUpstream.from_config(cfg)
        load = gate_loader(cfg, cfg.gates.policy or upstream.backend.fingerprint)
        return load(), upstream, load
    load = gate_loader(cfg, None)
    return load(), Upstream.from_config(cfg.upstream), load


def reload_on_sighup(app) -> None:
    """SIGHUP reloads the gates from their configured paths in a thread (the signal handler itself only starts
    it); the serving gates decide until the new ones are in, and stay if the load fails (logged)."""
    def reload() -> None:
        try:
            app.state.reloader.reload()
        except Exception:  # noqa: BLE001 - logged by the reloader; a failed reload keeps the serving gates
            pass

    signal.signal(signal.SIGHUP, lambda *_: threading.Thread(target=reload, name="toolwise-reload",
                                                             daemon=True).start())


@hydra.main(config_path=CONFIG_DIR, config_name="serve", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        keys = load_api_keys(cfg.auth)
    except (ValueError, FileNotFoundError) as e:     # a key no client could send, a key file that is not there
        raise SystemExit(f"refusing to start: {e}") from None
    check_bind(cfg.host, keys, cfg.auth.env)
    if not is_loopback(cfg.host):
        # uvicorn bounds neither how long a client may take to send a request head nor a connection that sends
        # nothing (server.py says why nothing in this process can): a client beyond this machine could hold
        # connections open at will
        logging.getLogger(__name__).warning(
            "serving on %s: request heads have no deadline in this process; put a reverse proxy in front that "
            'bounds them to limits.header_timeout_s (%gs): docs/guide.md, "Gated endpoint behind a reverse proxy"',
            cfg.host, cfg.limits.header_timeout_s)
    # Hydra's logging puts the root logger at INFO: httpx would log a line per upstream call (uvicorn logs access)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    gates, upstream, load = build(cfg)
    app = create_app(cfg, gates, upstream, reload_gates=load)
    reload_on_sighup(app)
    gated = " ".join(f"{name}={cfg.gates.get(name)}" for name in registered())
    print(f"serving {upstream.base_url} gated by {gated} (on_error={cfg.gates.on_error}) at "
          f"http://{cfg.host}:{cfg.port}/v1", flush=True)
    uvicorn.Server(uvicorn_config(app, cfg.limits, host=cfg.host, port=cfg.port, log_level=cfg.log_level)).run()


if __name__ == "__main__":
    main()
