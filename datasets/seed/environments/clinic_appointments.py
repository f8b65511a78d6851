"""Outpatient clinic scheduling: patients, doctors, referrals and appointments."""

import datetime
from typing import TypedDict

WEEKDAY_NAMES = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
VISIT_DURATIONS = {"standard": 30, "extended": 60}
MAX_DAYS_AHEAD = 60
NO_SHOW_LIMIT = 3


class PatientInfo(TypedDict):
    patient_id: str
    name: str
    email: str
    phone: str
    date_of_birth: str
    insurance_plan: str  # a plan name, or "self-pay"
    no_show_count: int


class DoctorInfo(TypedDict):
    doctor_id: str
    name: str
    specialty: str
    working_days: list[str]  # e.g. ["Mon", "Wed"]
    start_time: str  # "09:00"
    end_time: str  # "17:00"
    accepted_insurance: list[str]
    requires_referral: bool


class AppointmentInfo(TypedDict):
    appointment_id: str
    patient_id: str
    doctor_id: str
    date: str
    start_time: str
    duration_minutes: int
    visit_type: str  # "standard" | "extended"
    status: str  # "scheduled" | "cancelled" | "completed" | "no_show"
    reason: str
    notes: list[str]
    referral_id: str


class ReferralInfo(TypedDict):
    referral_id: str
    patient_id: str
    specialty: str
    status: str  # "active" | "used"
    expires_on: str


def _minutes(clock: str) -> int:
    hours, minutes = clock.split(":")
    return int(hours) * 60 + int(minutes)


def _clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


class ClinicAppointments:
    def __init__(self, init_config: dict):
        """Create the clinic's records from the initial configuration."""
        self.current_date: str = init_config.get("current_date", "2026-03-10")
        self.patients: dict[str, PatientInfo] = init_config.get("patients", {})
        self.doctors: dict[str, DoctorInfo] = init_config.get("doctors", {})
        self.appointments: dict[str, AppointmentInfo] = init_config.get("appointments", {})
        self.referrals: dict[str, ReferralInfo] = init_config.get("referrals", {})
        self.next_appointment_number: int = init_config.get("next_appointment_number", 1)

    # ------------------------------------------------------------------ helpers

    def _parse_date(self, text: str) -> datetime.date | None:
        try:
            return datetime.date.fromisoformat(text)
        except (TypeError, ValueError):
            return None

    def _parse_clock(self, text: str) -> int | None:
        parts = text.split(":") if isinstance(text, str) else []
        if len(parts) != 2 or not parts[0].isdigit() or not parts[1].isdigit():
            return None
        value = int(parts[0]) * 60 + int(parts[1])
        if int(parts[1]) >= 60 or value >= 24 * 60:
            return None
        return value

    def _busy(self, key: str, owner_id: str, day: str, start: int, end: int, ignore_id: str) -> bool:
        for appointment in self.appointments.values():
            if appointment["appointment_id"] == ignore_id or appointment["status"] != "scheduled":
                continue
            if appointment[key] != owner_id or appointment["date"] != day:
                continue
            other_start = _minutes(appointment["start_time"])
            other_end = other_start + appointment["duration_minutes"]
            if start < other_end and other_start < end:
                return True
        return False

    def _slot_error(
        self, doctor: DoctorInfo, patient_id: str, day: str, start_time: str, duration: int, ignore_id: str
    ) -> str:
        """Why a slot cannot be booked, or an empty string when it can."""
        when = self._parse_date(day)
        if when is None:
            return f"Invalid date {day!r}; use YYYY-MM-DD."
        today = datetime.date.fromisoformat(self.current_date)
        if when <= today:
            return "Appointments can only be booked from tomorrow onwards."
        if when > today + datetime.timedelta(days=MAX_DAYS_AHEAD):
            return f"Appointments can be booked at most {MAX_DAYS_AHEAD} days ahead."
        if WEEKDAY_NAMES[when.weekday()] not in doctor["working_days"]:
            return f"{doctor['name']} does not work on {WEEKDAY_NAMES[when.weekday()]}."
        start = self._parse_clock(start_time)
        if start is None:
            return f"Invalid time {start_time!r}; use HH:MM."
        if start % 30 != 0:
            return "Appointments start on the hour or half hour."
        end = start + duration
        if start < _minutes(doctor["start_time"]) or end > _minutes(doctor["end_time"]):
            return (
                f"{doctor['name']} sees patients from {doctor['start_time']} to {doctor['end_time']}; "
                f"a {duration}-minute visit at {start_time} does not fit."
            )
        if self._busy("doctor_id", doctor["doctor_id"], day, start, end, ignore_id):
            return f"{doctor['name']} already has an appointment at that time."
        if self._busy("patient_id", patient_id, day, start, end, ignore_id):
            return "The patient already has another appointment at that time."
        return ""

    def _usable_referral(self, patient_id: str, specialty: str, day: str) -> ReferralInfo | None:
        for referral in sorted(self.referrals.values(), key=lambda r: r["expires_on"]):
            if (
                referral["patient_id"] == patient_id
                and referral["specialty"] == specialty
                and referral["status"] == "active"
                and referral["expires_on"] >= day
            ):
                return referral
        return None

    # ------------------------------------------------------------------ queries

    def find_patients(self, name: str = "", email: str = "") -> dict:
        """Search patients by (part of) their name or by exact email address.

        Args:
            name: Part of the patient's name, case-insensitive.
            email: The patient's email address.
        """
        if not name and not email:
            return {"success": False, "error": "Give a name or an email to search for."}
        matches = [
            patient
            for patient in self.patients.values()
            if (not name or name.lower() in patient["name"].lower())
            and (not email or email.lower() == patient["email"].lower())
        ]
        return {"success": True, "data": matches}

    def get_patient(self, patient_id: str) -> dict:
        """Get one patient's record.

        Args:
            patient_id: The patient's id, e.g. "P-101".
        """
        patient = self.patients.get(patient_id)
        if patient is None:
            return {"success": False, "error": f"No patient with id {patient_id}."}
        return {"success": True, "data": patient}

    def list_doctors(self, specialty: str = "", name: str = "") -> dict:
        """List the clinic's doctors, optionally filtered by specialty or by (part of) their name.

        Args:
            specialty: A specialty such as "cardiology" (case-insensitive).
            name: Part of the doctor's name (case-insensitive).
        """
        matches = [
            doctor
            for doctor in self.doctors.values()
            if (not specialty or specialty.lower() == doctor["specialty"].lower())
            and (not name or name.lower() in doctor["name"].lower())
        ]
        return {"success": True, "data": matches}

    def get_doctor(self, doctor_id: str) -> dict:
        """Get one doctor's record, including working days, hours and accepted insurance plans.

        Args:
            doctor_id: The doctor's id, e.g. "D-01".
        """
        doctor = self.doctors.get(doctor_id)
        if doctor is None:
            return {"success": False, "error": f"No doctor with id {doctor_id}."}
        return {"success": True, "data": doctor}

    def get_available_slots(self, doctor_id: str, date: str, visit_type: str = "standard") -> dict:
        """List the start times at which a doctor is free for a visit on a given date.

        Args:
            doctor_id: The doctor's id.
            date: The day, as YYYY-MM-DD.
            visit_type: "standard" (30 minutes) or "extended" (60 minutes).
        """
        doctor = self.doctors.get(doctor_id)
        if doctor is None:
            return {"success": False, "error": f"No doctor with id {doctor_id}."}
        duration = VISIT_DURATIONS.get(visit_type)
        if duration is None:
            return {"success": False, "error": "visit_type must be 'standard' or 'extended'."}
        if self._parse_date(date) is None:
            return {"success": False, "error": f"Invalid date {date!r}; use YYYY-MM-DD."}
        free = []
        start = _minutes(doctor["start_time"])
        while start + duration <= _minutes(doctor["end_time"]):
            if not self._slot_error(doctor, "", date, _clock(start), duration, ""):
                free.append(_clock(start))
            start += 30
        return {"success": True, "data": {"doctor_id": doctor_id, "date": date, "free_start_times": free}}

    def list_patient_appointments(self, patient_id: str, status: str = "") -> dict:
        """List a patient's appointments, optionally only those with a given status.

        Args:
            patient_id: The patient's id.
            status: "scheduled", "cancelled", "completed" or "no_show"; empty for all.
        """
        if patient_id not in self.patients:
            return {"success": False, "error": f"No patient with id {patient_id}."}
        matches = [
            a
            for a in self.appointments.values()
            if a["patient_id"] == patient_id and (not status or a["status"] == status)
        ]
        matches.sort(key=lambda a: (a["date"], a["start_time"]))
        return {"success": True, "data": matches}

    def get_appointment(self, appointment_id: str) -> dict:
        """Get one appointment.

        Args:
            appointment_id: The appointment's id, e.g. "APT-1001".
        """
        appointment = self.appointments.get(appointment_id)
        if appointment is None:
            return {"success": False, "error": f"No appointment with id {appointment_id}."}
        return {"success": True, "data": appointment}

    def list_doctor_schedule(self, doctor_id: str, date: str) -> dict:
        """List a doctor's scheduled appointments on a date (times only, no patient details).

        Args:
            doctor_id: The doctor's id.
            date: The day, as YYYY-MM-DD.
        """
        if doctor_id not in self.doctors:
            return {"success": False, "error": f"No doctor with id {doctor_id}."}
        busy = [
            {"start_time": a["start_time"], "duration_minutes": a["duration_minutes"]}
            for a in self.appointments.values()
            if a["doctor_id"] == doctor_id and a["date"] == date and a["status"] == "scheduled"
        ]
        busy.sort(key=lambda b: str(b["start_time"]))
        return {"success": True, "data": busy}

    def list_patient_referrals(self, patient_id: str) -> dict:
        """List a patient's specialist referrals.

        Args:
            patient_id: The patient's id.
        """
        if patient_id not in self.patients:
            return {"success": False, "error": f"No patient with id {patient_id}."}
        return {
            "success": True,
            "data": [r for r in self.referrals.values() if r["patient_id"] == patient_id],
        }

    # ------------------------------------------------------------------ changes

    def book_appointment(
        self,
        patient_id: str,
        doctor_id: str,
        date: str,
        start_time: str,
        visit_type: str = "standard",
        reason: str = "",
    ) -> dict:
        """Book an appointment for a patient with a doctor.

        Args:
            patient_id: The patient's id.
            doctor_id: The doctor's id.
            date: The day, as YYYY-MM-DD.
            start_time: The start time, as HH:MM (on the hour or half hour).
            visit_type: "standard" (30 minutes) or "extended" (60 minutes).
            reason: The reason for the visit.
        """
        patient = self.patients.get(patient_id)
        if patient is None:
            return {"success": False, "error": f"No patient with id {patient_id}."}
        doctor = self.doctors.get(doctor_id)
        if doctor is None:
            return {"success": False, "error": f"No doctor with id {doctor_id}."}
        duration = VISIT_DURATIONS.get(visit_type)
        if duration is None:
            return {"success": False, "error": "visit_type must be 'standard' or 'extended'."}
        if patient["no_show_count"] >= NO_SHOW_LIMIT:
            return {
                "success": False,
                "error": "The patient has too many missed appointments; book at the front desk instead.",
            }
        if patient["insurance_plan"] != "self-pay" and patient["insurance_plan"] not in doctor["accepted_insurance"]:
            return {
                "success": False,
                "error": f"{doctor['name']} does not accept the insurance plan {patient['insurance_plan']}.",
            }
        problem = self._slot_error(doctor, patient_id, date, start_time, duration, "")
        if problem:
            return {"success": False, "error": problem}
        referral_id = ""
        if doctor["requires_referral"]:
            referral = self._usable_referral(patient_id, doctor["specialty"], date)
            if referral is None:
                return {
                    "success": False,
                    "error": f"Seeing {doctor['name']} needs an active {doctor['specialty']} referral "
                    "valid on the appointment date.",
                }
            referral["status"] = "used"
            referral_id = referral["referral_id"]
        appointment_id = f"APT-{self.next_appointment_number}"
        self.next_appointment_number += 1
        self.appointments[appointment_id] = {
            "appointment_id": appointment_id,
            "patient_id": patient_id,
            "doctor_id": doctor_id,
            "date": date,
            "start_time": _clock(_minutes(start_time)),
            "duration_minutes": duration,
            "visit_type": visit_type,
            "status": "scheduled",
            "reason": reason,
            "notes": [],
            "referral_id": referral_id,
        }
        return {"success": True, "data": self.appointments[appointment_id]}

    def reschedule_appointment(self, appointment_id: str, new_date: str, new_start_time: str) -> dict:
        """Move a scheduled appointment to another date and time with the same doctor.

        Args:
            appointment_id: The appointment to move.
            new_date: The new day, as YYYY-MM-DD.
            new_start_time: The new start time, as HH:MM.
        """
        appointment = self.appointments.get(appointment_id)
        if appointment is None:
            return {"success": False, "error": f"No appointment with id {appointment_id}."}
        if appointment["status"] != "scheduled":
            return {"success": False, "error": f"Appointment {appointment_id} is {appointment['status']}."}
        if appointment["date"] == self.current_date:
            return {
                "success": False,
                "error": "Same-day appointments cannot be changed; call the front desk.",
            }
        doctor = self.doctors[appointment["doctor_id"]]
        problem = self._slot_error(
            doctor,
            appointment["patient_id"],
            new_date,
            new_start_time,
            appointment["duration_minutes"],
            appointment_id,
        )
        if problem:
            return {"success": False, "error": problem}
        if appointment["referral_id"]:
            referral = self.referrals.get(appointment["referral_id"])
            if referral is not None and referral["expires_on"] < new_date:
                return {
                    "success": False,
                    "error": "The referral used for this visit expires before the new date.",
                }
        appointment["date"] = new_date
        appointment["start_time"] = _clock(_minutes(new_start_time))
        return {"success": True, "data": appointment}

    def cancel_appointment(self, appointment_id: str, reason: str = "") -> dict:
        """Cancel a scheduled appointment; a referral it used becomes active again.

        Args:
            appointment_id: The appointment to cancel.
            reason: Why the patient cancels.
        """
        appointment = self.appointments.get(appointment_id)
        if appointment is None:
            return {"success": False, "error": f"No appointment with id {appointment_id}."}
        if appointment["status"] != "scheduled":
            return {"success": False, "error": f"Appointment {appointment_id} is {appointment['status']}."}
        if appointment["date"] == self.current_date:
            return {
                "success": False,
                "error": "Same-day appointments cannot be cancelled; call the front desk.",
            }
        appointment["status"] = "cancelled"
        if reason:
            appointment["notes"].append(f"Cancelled: {reason}")
        referral = self.referrals.get(appointment["referral_id"]) if appointment["referral_id"] else None
        if referral is not None:
            referral["status"] = "active"
        return {"success": True, "message": f"Appointment {appointment_id} cancelled."}

    def add_appointment_note(self, appointment_id: str, note: str) -> dict:
        """Attach a note for the doctor to a scheduled appointment.

        Args:
            appointment_id: The appointment.
            note: The note text.
        """
        appointment = self.appointments.get(appointment_id)
        if appointment is None:
            return {"success": False, "error": f"No appointment with id {appointment_id}."}
        if appointment["status"] != "scheduled":
            return {"success": False, "error": "Notes can only be added to scheduled appointments."}
        if not note.strip():
            return {"success": False, "error": "The note is empty."}
        appointment["notes"].append(note.strip())
        return {"success": True, "message": f"Note added to {appointment_id}."}

    def update_patient_contact(self, patient_id: str, email: str = "", phone: str = "") -> dict:
        """Change a patient's email address and/or phone number.

        Args:
            patient_id: The patient's id.
            email: The new email address (leave empty to keep).
            phone: The new phone number (leave empty to keep).
        """
        patient = self.patients.get(patient_id)
        if patient is None:
            return {"success": False, "error": f"No patient with id {patient_id}."}
        if not email and not phone:
            return {"success": False, "error": "Give a new email or phone number."}
        if email and ("@" not in email or "." not in email.split("@")[-1]):
            return {"success": False, "error": f"{email!r} is not a valid email address."}
        if email:
            for other in self.patients.values():
                if other["patient_id"] != patient_id and other["email"].lower() == email.lower():
                    return {"success": False, "error": "That email belongs to another patient."}
            patient["email"] = email
        if phone:
            patient["phone"] = phone
        return {"success": True, "data": patient}

    def update_patient_insurance(self, patient_id: str, insurance_plan: str) -> dict:
        """Record a patient's new insurance plan (or "self-pay").

        Args:
            patient_id: The patient's id.
            insurance_plan: The plan name, e.g. "BlueCare Silver", or "self-pay".
        """
        patient = self.patients.get(patient_id)
        if patient is None:
            return {"success": False, "error": f"No patient with id {patient_id}."}
        if not insurance_plan.strip():
            return {"success": False, "error": "The insurance plan is empty."}
        patient["insurance_plan"] = insurance_plan.strip()
        return {"success": True, "data": patient}
