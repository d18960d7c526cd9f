"""End-to-end recipes: one command per published result, resumable phase by phase."""
