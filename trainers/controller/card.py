"""The ``README.md`` of an exported controller: what it decides, the data, the metrics, how to load and
how to reproduce it. Written with huggingface_hub's ``ModelCard`` so the YAML front matter is the hub's."""
from __future__ import annotations

import json

from huggingface_hub import ModelCard, ModelCardData
from omegaconf import DictConfig

from data_builders.gates import gate_of_kind
from trainers.controller.metrics import metrics_table



def _named(contract: dict) -> str:
    out = ""
    if contract.get("feature_names"):
        out += f"; named columns (checked on load): {', '.join(contract['feature_names'])}"
    if contract.get("tools_seen") is not None:
        out += f"\n- Tools its points called ({len(contract['tools_seen'])}): {', '.join(contract['tools_seen'])}"
    return out


def controller_card(recipe: DictConfig, controller, metrics: dict, manifest: dict, export_dir, command: str) -> str:
    kind = manifest["kind"]
    test, cal = metrics["splits"]["test"], metrics["calibration"]
    data = ModelCardData(library_name="toolwise", tags=["toolwise", "tool-use-controller", recipe.name])
    baselines = ""
    if metrics.get("baselines"):
        rows = [f"| {recipe.name} ({controller.registry_name}, all features) | {test['all'].get('auroc')} |"]
        rows += [f"| {k}{' (' + b['detail'] + ')' if b.get('detail') else ''} | {b['test']['auroc']} |"
                 for k, b in metrics["baselines"].items()]
        baselines = "\n## Baselines (test AUROC)\n\n| model | AUROC |\n|---|---|\n" + "\n".join(rows) + "\n"
    content = f"""---
{data.to_yaml()}
---

# {recipe.name}: `{controller.registry_name}`

Decides, at each `{kind}` decision point, whether to **{gate_of_kind(kind).card_action}**:
`p = sigmoid(logits / T) ≥ τ` with T = {cal['temperature']:.4f} and τ = {cal['tau']:.4f}
(τ rule `{cal['tau_method']}` = {cal['tau_value']} on the validation split).

- Label rule: {manifest['label_rule']}
- Policy (backend fingerprint): `{manifest['backend']}`
- Featurizer: `{manifest['featurizer']['name']}` v{manifest['featurizer']['version']}, input shape
  {controller.contract['input_shape']}{_named(controller.contract)}
- Tasks: `{json.dumps(manifest.get('task_source'))}` (task hash {manifest['task_hash']})
- Points: {metrics['points']}; dataset `{metrics['dataset']}`
- Training: {metrics['train_seconds']:.1f} s (Lightning, CPU)

## Test metrics

```
{metrics_table(test, 'test split')}
```
Columns: see `trainers/controller/metrics.py` (`missed` = positives denied the action, as a share of all points).
{baselines}
## Use

```python
import controllers
from data_builders.gates import gate_named
featurizer = gate_named("{recipe.name}").featurizer
gate = controllers.load("{export_dir}")
gate.check_contract(featurizer={{"name": "{manifest['featurizer']['name']}", "version": {manifest['featurizer']['version']}}},
                    backend="{manifest['backend']}",
                    feature_names=featurizer.feature_names)
p = gate.predict_proba(x)      # x from featurizer.controller_input(...)
```

## Reproduce

```
{command}
```
The decision points were built by `{manifest.get('build_command', 'python -m data_builders.build (command not recorded)')}`.
(`train_config.yaml` holds the resolved configuration; `metrics.json` every split by category and difficulty.)
"""
    return ModelCard(content).content
