"""A model type only this module makes known: `rayrl_marked_llama`, a Llama under its own config and model classes,
registered with transformers' Auto classes on import (what verl's `model.external_lib` modules do): the causal LM for
the policy, token classification for a critic's value head, and the bare model that head builds on. A folder whose
config.json names that type loads only in a process that imported this module, as the class of the model shows."""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForTokenClassification,
    LlamaConfig,
    LlamaForCausalLM,
    LlamaForTokenClassification,
    LlamaModel,
)

MODEL_TYPE = "rayrl_marked_llama"


class MarkedLlamaConfig(LlamaConfig):
    model_type = MODEL_TYPE


class MarkedLlamaModel(LlamaModel):
    config_class = MarkedLlamaConfig


class MarkedLlamaForCausalLM(LlamaForCausalLM):
    config_class = MarkedLlamaConfig


class MarkedLlamaForTokenClassification(LlamaForTokenClassification):
    config_class = MarkedLlamaConfig


AutoConfig.register(MODEL_TYPE, MarkedLlamaConfig, exist_ok=True)
AutoModel.register(MarkedLlamaConfig, MarkedLlamaModel, exist_ok=True)
AutoModelForCausalLM.register(MarkedLlamaConfig, MarkedLlamaForCausalLM, exist_ok=True)
AutoModelForTokenClassification.register(MarkedLlamaConfig, MarkedLlamaForTokenClassification, exist_ok=True)
