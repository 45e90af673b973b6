"""Cost governance (R5, Z1, E25): money budgets, call-rate limits, kill switches.

- ``models``: Budget (a limit with its own counters), BudgetReservation (a call in
  flight), BudgetAlert (a threshold crossed once per period), KillSwitch,
  SpendSettings (a tenant's time zone and alert webhook).
- ``periods``: when a budget's period started and when it resets, in the tenant's zone.
- ``guard``: reserve the worst case before a call, settle the real cost after it.
- ``provider``: the provider wrapper every LLM call goes through (``agents.runtime.llm``).
- ``alerts``: audit row, chat notice and signed webhook when a threshold is crossed.
"""
