"""What every app shares and none owns: the domain errors services raise and adapters map to answers.

This package sits below every app (no import of an app) and holds no models.
"""
