import jax
import jax.numpy as jnp
import numpy as np


def host_lookup(ids):
    table = np.arange(10, dtype=np.float32)
    return table[np.asarray(ids)]  # an id past the table's end fails here, on the host


@jax.jit
def step(ids):
    out = jax.pure_callback(host_lookup, jax.ShapeDtypeStruct(ids.shape, jnp.float32), ids)
    return out.sum()


print("step 0", float(step(jnp.array([1, 2, 3]))), flush=True)
print("step 1", float(step(jnp.array([4, 12, 3]))), flush=True)
