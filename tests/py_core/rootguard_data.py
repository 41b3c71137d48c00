"""One person's true values for the default RootGuard profile, shared by the tests."""

TRUE = {
    "age": 52,
    "height_cm": 180.3,
    "weight_kg": 81.0,
    "waist_cm": 92.0,
    "sbp": 128,
    "dbp": 82,
    "glucose": 97,
    "insulin": 8.2,
    "ast": 40,
    "alt": 35,
    "platelets": 230,
    "creatinine": 0.95,
    "triglycerides": 140,
    "hdl": 48,
}
