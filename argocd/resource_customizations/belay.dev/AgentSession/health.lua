-- Argo CD health check for belay.dev/AgentSession.
--
-- Install it under resource.customizations.health.belay.dev_AgentSession in argocd-cm (it needs
-- none of Lua's optional libraries). It reads only what the operator writes (phase,
-- observedGeneration, conditions) and maps it:
--   being deleted                                      -> Progressing ("Pending deletion", which
--                                                         Argo CD itself says before asking)
--   the operator has not observed this generation     -> Progressing
--   Succeeded                                          -> Healthy
--   Failed, or Stalled=True (RecoveryFailed, RecordCorrupt, RepeatedFailure, ...) -> Degraded
--   Recovering=True (the operator replaces a lost or silent attempt, or a new one restores)
--                                                      -> Progressing
--   WaitingOnUser=True (an approval, a decision)       -> Suspended: a person has to act
--   WaitingOnExternal=True                             -> Progressing
--   ReadyForReview                                     -> Healthy: the deliverable can be reviewed
--   Pending, Running                                   -> Progressing
local hs = {}

local function condition(status, kind)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function is_true(c)
  return c ~= nil and c.status == "True"
end

local function describe(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

if obj.metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Pending deletion"
  return hs
end

local status = obj.status
if status == nil or status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report a status"
  return hs
end

local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local ready = condition(status, "Ready")
local stalled = condition(status, "Stalled")

if status.phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = describe(ready, "Completed")
elseif status.phase == "Failed" then
  hs.status = "Degraded"
  hs.message = describe(ready, "Failed")
elseif is_true(stalled) then
  hs.status = "Degraded"
  hs.message = describe(stalled, "Stalled")
elseif is_true(condition(status, "Recovering")) then
  hs.status = "Progressing"
  hs.message = "Recovering: " .. describe(condition(status, "Recovering"), "restoring from the last verified checkpoint")
elseif is_true(condition(status, "WaitingOnUser")) then
  hs.status = "Suspended"
  hs.message = "Waiting on user: " .. describe(condition(status, "WaitingOnUser"), status.waitingOn or "")
elseif is_true(condition(status, "WaitingOnExternal")) then
  hs.status = "Progressing"
  hs.message = "Waiting on external condition: " .. describe(condition(status, "WaitingOnExternal"), "")
elseif status.phase == "ReadyForReview" then
  hs.status = "Healthy"
  hs.message = describe(condition(status, "ReadyForReview"), "Ready for review")
else
  -- Pending or Running: the step it runs, or what it waits for (the store, a first attempt).
  hs.status = "Progressing"
  hs.message = status.phase
  if status.currentStep ~= nil and status.currentStep ~= "" then
    hs.message = hs.message .. ": " .. status.currentStep
  elseif is_true(condition(status, "Reconciling")) then
    hs.message = hs.message .. ": " .. describe(condition(status, "Reconciling"), "reconciling")
  end
end
return hs
