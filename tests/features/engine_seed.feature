@engine
Feature: The real worker refuses a --config seed it cannot start from
  The worker process boots on a stand-in of its own, where nothing is
  stored yet, so the seed would become the stored configuration. A seed is
  checked as the configuration worker will expand it; an unusable one ends
  the boot instead of being registered or replaced by defaults. Skips when
  no stand-in is available.

  Scenario: a seed whose placeholder default is not a valid value is refused and nothing is registered
    # Prevents: an invalid value hidden behind ${VAR:default} registered (breaking every later boot),
    # defaults registered in place of the operator's seed, or a bridge seed falling back to fs.
    Given a fresh engine with nothing stored for the session-manager configuration
    And the seed file holds:
      """
      adapter:
        name: bridge
        config:
          url: ws://127.0.0.1:9
          timeout_ms: ${SM_SEED_TIMEOUT:soon}
      """
    When the session-manager process boots on that engine with the seed
    Then it exits with a non-zero status, logging "is not a valid configuration (after ${VAR:default} expansion)" and the seed's path
    And nothing is stored for the session-manager configuration on that engine
