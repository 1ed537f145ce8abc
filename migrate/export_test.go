package migrate

// Shrinking is shrinking, for the external tests.
var Shrinking = shrinking
