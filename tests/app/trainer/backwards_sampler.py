"""A curriculum sampler for the end-to-end test (data.sampler.class_path): the training set backwards, each update
appended to the file data.sampler.log names, its update count kept in its state."""

import json


class Backwards:
    def __init__(self, data_source, data_config):
        self.n, self.log, self.updates = len(data_source), data_config.sampler.log, 0

    def __iter__(self):
        return iter(range(self.n - 1, -1, -1))

    def __len__(self):
        return self.n

    def update(self, batch):
        self.updates += 1
        record = {
            "step": batch.meta_info["global_steps"],
            "updates": self.updates,
            "uid": sorted(set(batch.non_tensor_batch["uid"].tolist())),
            "dataset_index": batch.non_tensor_batch["dataset_index"].tolist(),
            "scores": batch.batch["token_level_scores"].sum(-1).tolist(),
        }
        with open(self.log, "a") as file:
            file.write(json.dumps(record) + "\n")

    def state_dict(self):
        return {"updates": self.updates}

    def load_state_dict(self, state):
        self.updates = state["updates"]
