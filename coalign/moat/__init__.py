"""MOAT: the joint alignment of a planner and a grounder (Algorithm 1 in `recipe.moat_rounds`), its Agent Lumos
baseline and cold start, the evaluation that measures the capability gap, its bench and report."""
