"""Small scenario texts shared by the defense, sweep and report tests."""


def gaussians(
    name: str,
    rest: str = "",
    *,
    seed: int = 7,
    d: int = 3,
    components: tuple[tuple[int, float], ...] = ((40, 0.0), (30, 2.0)),
    protocol: str = "fedwad",
    params: str = "{support_size: 5, iterations: 4}",
    transform: str | None = "{name: scale, params: {clip_norm: 6.0}}",
) -> str:
    """A two-party scenario on a mixture of Gaussians, one component per party (class
    subsets), with ``rest`` (threat model, attacks, sweep, ...) appended."""
    comps = "".join(f"        - {{n: {n}, mean: {m}}}\n" for n, m in components)
    tf = f"  transform: {transform}\n" if transform else ""
    return (
        f"name: {name}\nseed: {seed}\ndata:\n  dataset:\n    name: gaussians\n    params:\n"
        f"      d: {d}\n      components:\n{comps}"
        "  partition:\n    name: class_subsets\n    params: {classes: [[0], [1]]}\n"
        f"  parties: [alice, bob]\n{tf}protocol:\n  name: {protocol}\n  params: {params}\n"
        f"{rest}\n"
    )


def tiny(name: str = "tiny", rest: str = "") -> str:
    """The default small FedWAD scenario (seed 7, d = 3, 40 + 30 rows)."""
    return gaussians(name, rest)


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
