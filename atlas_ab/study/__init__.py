"""Studies that drive several arms at once, above both the run side and the analysis: a
sequential study runs its arms wave by wave in lockstep and judges its registrations between
waves (sequential.py; when it looks: looks.py)."""
