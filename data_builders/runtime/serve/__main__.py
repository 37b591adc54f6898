"""``python -m data_builders.runtime.serve upstream.base_url=http://127.0.0.1:8000/v1
gates.toolgate=checkpoints/toolgate/<run> gates.g_step=checkpoints/g_step/<run> host=127.0.0.1 port=8080``

Loads the gates (their contracts checked against ``gates.policy`` when given), then serves until stopped.
Refuses to start on an address other machines can reach unless API keys are set (``auth``)."""
from __future__ import annotations

import logging

import hydra
import uvicorn
from omegaconf import DictConfig

from recipes import CONFIG_DIR

from .app import create_app
from .auth import check_bind, load_api_keys
from .upstream import Upstream


def load_gates(cfg: DictConfig):
    """The configured gates, or None when none is (the endpoint is then a plain proxy with the same limits)."""
    if cfg.toolgate is None and cfg.g_step is None:
        return None
    # why here: the runtime API loads torch, the controllers and the featurizers (MiniLM); a plain proxy and the
    # tests' injected gates do without them.
    from data_builders.runtime.api import Gates

    # warmed up before the port opens: the first request must not wait seconds for the encoder to load
    return Gates.load(toolgate=cfg.toolgate, g_step=cfg.g_step, policy=cfg.policy, strict=cfg.strict).warmup()


@hydra.main(config_path=CONFIG_DIR, config_name="serve", version_base="1.3")
def main(cfg: DictConfig) -> None:
    check_bind(cfg.host, load_api_keys(cfg.auth), cfg.auth.env)
    # Hydra's logging puts the root logger at INFO: httpx would log a line per upstream call (uvicorn logs access)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    app = create_app(cfg, load_gates(cfg.gates), Upstream.from_config(cfg.upstream))
    print(f"serving {cfg.upstream.base_url} gated by toolgate={cfg.gates.toolgate} g_step={cfg.gates.g_step} "
          f"(on_error={cfg.gates.on_error}) at http://{cfg.host}:{cfg.port}/v1", flush=True)
    uvicorn.run(app, host=cfg.host, port=cfg.port, log_level=cfg.log_level)


if __name__ == "__main__":
    main()
