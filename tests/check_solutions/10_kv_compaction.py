"""Exercise 10 answered by ``racer_ref.verify.keep_accepted``."""
from types import SimpleNamespace

from racer_ref.verify import keep_accepted as _keep


def keep_accepted(keys, past_length, accepted):
    layer = SimpleNamespace(keys=keys, values=keys.clone())
    _keep(SimpleNamespace(layers=[layer]), past_length, list(accepted))
    return layer.keys
