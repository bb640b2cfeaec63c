"""Small scenario texts shared by the defense, sweep and report tests."""

TINY = """\
name: {name}
seed: 7
data:
  dataset:
    name: gaussians
    params:
      d: 3
      components:
        - {{n: 40, mean: 0.0}}
        - {{n: 30, mean: 2.0}}
  partition:
    name: class_subsets
    params: {{classes: [[0], [1]]}}
  parties: [alice, bob]
  transform: {{name: scale, params: {{clip_norm: 6.0}}}}
protocol:
  name: fedwad
  params: {{support_size: 5, iterations: 4}}
{rest}
"""


def tiny(name: str = "tiny", rest: str = "") -> str:
    return TINY.format(name=name, rest=rest)


NOISE_SWEEP = tiny(
    "noise_sweep",
    """\
sweep:
  defenses:
    - []
    - [{name: gaussian_measure_noise, params: {clip_norm: 6.0, push_max: 0.5, noise_multiplier: 0.01}}]
    - [{name: gaussian_measure_noise, params: {clip_norm: 6.0, push_max: 0.5, noise_multiplier: 0.1}}]
    - [{name: gaussian_measure_noise, params: {clip_norm: 6.0, push_max: 0.5, noise_multiplier: 1.0}}]
seeds: [0, 1, 2, 3, 4]
""",
)
