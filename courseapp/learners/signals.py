"""Events of the learners app, for the apps above it (demo, lab, …), which own rows of a learner:
learners imports none of them."""
from django.dispatch import Signal

# A guest is about to be merged into an account's learner and deleted (learner_merge_guest):
# receivers move the guest's rows to `into`, in the same transaction. Args: guest, into.
guest_merging = Signal()


def move_on_merge(model_label: str, field: str) -> None:
    """For an app above this one: when a guest is merged, its rows of `model_label` ("app.Model")
    whose `field` points at the guest are moved to the account's learner, not deleted with the
    guest. Called from the app's AppConfig.ready."""
    from django.apps import apps

    def move(sender, *, guest, into, **kwargs):
        apps.get_model(model_label).objects.filter(**{field: guest}).update(**{field: into})

    guest_merging.connect(move, weak=False, dispatch_uid=f"move-on-merge:{model_label}")
