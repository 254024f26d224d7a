-- privai-admin schema, version 9: LoRA adapters are models that depend on
-- a base model (models/models.h).  An adapter is served by every
-- deployment of its base, under its own name; the base cannot be deleted
-- while an adapter names it.
ALTER TABLE models ADD COLUMN kind TEXT NOT NULL DEFAULT 'model' CHECK (kind IN ('model', 'lora'));
ALTER TABLE models ADD COLUMN base_model_id INTEGER REFERENCES models(id) ON DELETE RESTRICT;
ALTER TABLE models ADD COLUMN lora_rank INTEGER;
ALTER TABLE models ADD COLUMN lora_alpha REAL;
CREATE INDEX models_base ON models(base_model_id) WHERE base_model_id IS NOT NULL;

-- an upload under way that will be an adapter: the name or id of its base
ALTER TABLE uploads ADD COLUMN base_model TEXT;
