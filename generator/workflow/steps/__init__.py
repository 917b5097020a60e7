"""The functions of `up`'s tasks, by stage: prepare (render, preflight, images), services
(start, wait), verdict (smoke, bench, down)."""
