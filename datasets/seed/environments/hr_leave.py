"""A company's leave management system: employees, leave balances, requests, approvals and blackout periods."""

import datetime
from typing import TypedDict

LEAVE_TYPES = ("annual", "sick", "personal")
SICK_BACKDATE_DAYS = 7
OPEN_STATUSES = ("pending", "approved")


class EmployeeInfo(TypedDict):
    employee_id: str
    name: str
    email: str
    department: str
    manager_id: str  # "" for the top of the hierarchy
    employment_type: str  # "full_time" | "part_time" | "contractor"
    status: str  # "active" | "terminated"


class LeaveRequestInfo(TypedDict):
    request_id: str
    employee_id: str
    leave_type: str
    start_date: str
    end_date: str
    days: int
    status: str  # "pending" | "approved" | "rejected" | "cancelled"
    reason: str
    approver_id: str
    decision_note: str


class BlackoutInfo(TypedDict):
    blackout_id: str
    department: str
    start_date: str
    end_date: str
    reason: str


class HRLeave:
    def __init__(self, init_config: dict):
        """Create the leave records from the initial configuration."""
        self.current_date: str = init_config.get("current_date", "2026-09-01")
        self.employees: dict[str, EmployeeInfo] = init_config.get("employees", {})
        self.leave_balances: dict[str, dict[str, float]] = init_config.get("leave_balances", {})
        self.leave_requests: dict[str, LeaveRequestInfo] = init_config.get("leave_requests", {})
        self.public_holidays: dict[str, str] = init_config.get("public_holidays", {})
        self.blackout_periods: dict[str, BlackoutInfo] = init_config.get("blackout_periods", {})
        self.next_request_number: int = init_config.get("next_request_number", 1)

    # ------------------------------------------------------------------ helpers

    def _working_days(self, start_date: str, end_date: str) -> int:
        day = datetime.date.fromisoformat(start_date)
        end = datetime.date.fromisoformat(end_date)
        count = 0
        while day <= end:
            if day.weekday() < 5 and day.isoformat() not in self.public_holidays:
                count += 1
            day += datetime.timedelta(days=1)
        return count

    def _pending_days(self, employee_id: str, leave_type: str, ignore_id: str) -> int:
        return sum(
            r["days"]
            for r in self.leave_requests.values()
            if r["employee_id"] == employee_id
            and r["leave_type"] == leave_type
            and r["status"] == "pending"
            and r["request_id"] != ignore_id
        )

    def _request_error(self, employee: EmployeeInfo, leave_type: str, start: str, end: str, ignore_id: str) -> str:
        """Why a leave request for these dates is not allowed, or an empty string."""
        try:
            first = datetime.date.fromisoformat(start)
            last = datetime.date.fromisoformat(end)
        except (TypeError, ValueError):
            return "Dates must be given as YYYY-MM-DD."
        if last < first:
            return "The end date is before the start date."
        today = datetime.date.fromisoformat(self.current_date)
        if leave_type == "sick":
            if first < today - datetime.timedelta(days=SICK_BACKDATE_DAYS):
                return f"Sick leave can be recorded at most {SICK_BACKDATE_DAYS} days back."
        elif first <= today:
            return f"{leave_type.capitalize()} leave must start after today ({self.current_date})."
        days = self._working_days(start, end)
        if days == 0:
            return "The period contains no working days."
        employee_id = employee["employee_id"]
        for other in self.leave_requests.values():
            if (
                other["employee_id"] == employee_id
                and other["status"] in OPEN_STATUSES
                and other["request_id"] != ignore_id
                and other["start_date"] <= end
                and start <= other["end_date"]
            ):
                return f"The dates overlap the {other['status']} request {other['request_id']}."
        if leave_type == "annual":
            for blackout in self.blackout_periods.values():
                if (
                    blackout["department"] == employee["department"]
                    and blackout["start_date"] <= end
                    and start <= blackout["end_date"]
                ):
                    return (
                        f"Annual leave is not allowed in {employee['department']} from {blackout['start_date']} "
                        f"to {blackout['end_date']} ({blackout['reason']})."
                    )
        balance = self.leave_balances.get(employee_id, {}).get(leave_type, 0)
        available = balance - self._pending_days(employee_id, leave_type, ignore_id)
        if days > available:
            return f"{days} working days requested but only {available:g} {leave_type} days are available."
        return ""

    # ------------------------------------------------------------------ queries

    def find_employees(self, name: str = "", email: str = "") -> dict:
        """Search employees by (part of) the name or by exact email address.

        Args:
            name: Part of the employee's name, case-insensitive.
            email: The employee's work email address.
        """
        if not name and not email:
            return {"success": False, "error": "Give a name or an email to search for."}
        matches = [
            e
            for e in self.employees.values()
            if (not name or name.lower() in e["name"].lower()) and (not email or email.lower() == e["email"].lower())
        ]
        return {"success": True, "data": matches}

    def get_employee(self, employee_id: str) -> dict:
        """Get one employee's record, including department and manager.

        Args:
            employee_id: The employee's id, e.g. "E-401".
        """
        employee = self.employees.get(employee_id)
        if employee is None:
            return {"success": False, "error": f"No employee with id {employee_id}."}
        return {"success": True, "data": employee}

    def list_direct_reports(self, manager_id: str) -> dict:
        """List the employees who report directly to a manager.

        Args:
            manager_id: The manager's employee id.
        """
        if manager_id not in self.employees:
            return {"success": False, "error": f"No employee with id {manager_id}."}
        return {"success": True, "data": [e for e in self.employees.values() if e["manager_id"] == manager_id]}

    def get_leave_balance(self, employee_id: str) -> dict:
        """Show an employee's leave balances per type, the days held by pending requests, and what is available.

        Args:
            employee_id: The employee's id.
        """
        if employee_id not in self.employees:
            return {"success": False, "error": f"No employee with id {employee_id}."}
        balances = self.leave_balances.get(employee_id, {})
        summary = {}
        for leave_type in LEAVE_TYPES:
            balance = balances.get(leave_type, 0)
            pending = self._pending_days(employee_id, leave_type, "")
            summary[leave_type] = {"balance": balance, "pending": pending, "available": balance - pending}
        return {"success": True, "data": summary}

    def list_leave_requests(self, employee_id: str, status: str = "") -> dict:
        """List an employee's leave requests, optionally only those with one status.

        Args:
            employee_id: The employee's id.
            status: "pending", "approved", "rejected" or "cancelled"; empty for all.
        """
        if employee_id not in self.employees:
            return {"success": False, "error": f"No employee with id {employee_id}."}
        found = [
            r
            for r in self.leave_requests.values()
            if r["employee_id"] == employee_id and (not status or r["status"] == status)
        ]
        found.sort(key=lambda r: r["start_date"])
        return {"success": True, "data": found}

    def get_leave_request(self, request_id: str) -> dict:
        """Get one leave request.

        Args:
            request_id: The request's id, e.g. "LR-5001".
        """
        request = self.leave_requests.get(request_id)
        if request is None:
            return {"success": False, "error": f"No leave request with id {request_id}."}
        return {"success": True, "data": request}

    def list_pending_approvals(self, manager_id: str) -> dict:
        """List the pending leave requests of a manager's direct reports.

        Args:
            manager_id: The manager's employee id.
        """
        if manager_id not in self.employees:
            return {"success": False, "error": f"No employee with id {manager_id}."}
        reports = {e["employee_id"] for e in self.employees.values() if e["manager_id"] == manager_id}
        pending = [r for r in self.leave_requests.values() if r["employee_id"] in reports and r["status"] == "pending"]
        return {"success": True, "data": pending}

    def list_public_holidays(self) -> dict:
        """List the public holidays (dates that do not count as working days)."""
        return {"success": True, "data": self.public_holidays}

    def list_blackout_periods(self, department: str = "") -> dict:
        """List the periods in which a department's staff cannot take annual leave.

        Args:
            department: A department name (case-insensitive); empty for all.
        """
        return {
            "success": True,
            "data": [
                b
                for b in self.blackout_periods.values()
                if not department or b["department"].lower() == department.lower()
            ],
        }

    def count_working_days(self, start_date: str, end_date: str) -> dict:
        """Count the working days (Monday to Friday, excluding public holidays) in a date range, inclusive.

        Args:
            start_date: First day, YYYY-MM-DD.
            end_date: Last day, YYYY-MM-DD.
        """
        try:
            if datetime.date.fromisoformat(end_date) < datetime.date.fromisoformat(start_date):
                return {"success": False, "error": "The end date is before the start date."}
        except (TypeError, ValueError):
            return {"success": False, "error": "Dates must be given as YYYY-MM-DD."}
        return {"success": True, "data": {"working_days": self._working_days(start_date, end_date)}}

    # ------------------------------------------------------------------ changes

    def submit_leave_request(
        self, employee_id: str, leave_type: str, start_date: str, end_date: str, reason: str = ""
    ) -> dict:
        """Submit a leave request for an employee; it waits for the direct manager's decision.

        Args:
            employee_id: The employee taking leave.
            leave_type: "annual", "sick" or "personal".
            start_date: First day of leave, YYYY-MM-DD.
            end_date: Last day of leave (inclusive), YYYY-MM-DD.
            reason: Optional reason.
        """
        employee = self.employees.get(employee_id)
        if employee is None:
            return {"success": False, "error": f"No employee with id {employee_id}."}
        if employee["status"] != "active":
            return {"success": False, "error": f"{employee['name']} is not an active employee."}
        if leave_type not in LEAVE_TYPES:
            return {"success": False, "error": "leave_type must be 'annual', 'sick' or 'personal'."}
        problem = self._request_error(employee, leave_type, start_date, end_date, "")
        if problem:
            return {"success": False, "error": problem}
        request_id = f"LR-{self.next_request_number}"
        self.next_request_number += 1
        self.leave_requests[request_id] = {
            "request_id": request_id,
            "employee_id": employee_id,
            "leave_type": leave_type,
            "start_date": start_date,
            "end_date": end_date,
            "days": self._working_days(start_date, end_date),
            "status": "pending",
            "reason": reason,
            "approver_id": "",
            "decision_note": "",
        }
        return {"success": True, "data": self.leave_requests[request_id]}

    def change_leave_dates(self, request_id: str, new_start_date: str, new_end_date: str) -> dict:
        """Change the dates of a pending leave request (all rules are checked again).

        Args:
            request_id: The pending request.
            new_start_date: New first day, YYYY-MM-DD.
            new_end_date: New last day (inclusive), YYYY-MM-DD.
        """
        request = self.leave_requests.get(request_id)
        if request is None:
            return {"success": False, "error": f"No leave request with id {request_id}."}
        if request["status"] != "pending":
            return {
                "success": False,
                "error": f"Request {request_id} is {request['status']}; only pending requests change.",
            }
        employee = self.employees[request["employee_id"]]
        problem = self._request_error(employee, request["leave_type"], new_start_date, new_end_date, request_id)
        if problem:
            return {"success": False, "error": problem}
        request["start_date"] = new_start_date
        request["end_date"] = new_end_date
        request["days"] = self._working_days(new_start_date, new_end_date)
        return {"success": True, "data": request}

    def approve_leave_request(self, request_id: str, approver_id: str, note: str = "") -> dict:
        """Approve a pending request as the employee's direct manager; the days are taken from the balance.

        Args:
            request_id: The pending request.
            approver_id: The employee id of the manager approving.
            note: Optional note to the employee.
        """
        request = self.leave_requests.get(request_id)
        if request is None:
            return {"success": False, "error": f"No leave request with id {request_id}."}
        if request["status"] != "pending":
            return {"success": False, "error": f"Request {request_id} is {request['status']}, not pending."}
        employee = self.employees[request["employee_id"]]
        if approver_id == employee["employee_id"]:
            return {"success": False, "error": "Employees cannot approve their own leave."}
        if approver_id != employee["manager_id"]:
            return {"success": False, "error": f"Only {employee['name']}'s direct manager can decide this request."}
        balances = self.leave_balances.get(employee["employee_id"], {})
        if balances.get(request["leave_type"], 0) < request["days"]:
            return {"success": False, "error": "The balance no longer covers this request."}
        balances[request["leave_type"]] = balances.get(request["leave_type"], 0) - request["days"]
        self.leave_balances[employee["employee_id"]] = balances
        request["status"] = "approved"
        request["approver_id"] = approver_id
        request["decision_note"] = note
        return {"success": True, "data": request}

    def reject_leave_request(self, request_id: str, approver_id: str, note: str) -> dict:
        """Reject a pending request as the employee's direct manager; a note explaining why is required.

        Args:
            request_id: The pending request.
            approver_id: The employee id of the manager rejecting.
            note: Why the request is rejected.
        """
        request = self.leave_requests.get(request_id)
        if request is None:
            return {"success": False, "error": f"No leave request with id {request_id}."}
        if request["status"] != "pending":
            return {"success": False, "error": f"Request {request_id} is {request['status']}, not pending."}
        employee = self.employees[request["employee_id"]]
        if approver_id != employee["manager_id"] or approver_id == employee["employee_id"]:
            return {"success": False, "error": f"Only {employee['name']}'s direct manager can decide this request."}
        if not note.strip():
            return {"success": False, "error": "A rejection needs a note explaining why."}
        request["status"] = "rejected"
        request["approver_id"] = approver_id
        request["decision_note"] = note.strip()
        return {"success": True, "data": request}

    def cancel_leave_request(self, request_id: str) -> dict:
        """Cancel a pending request, or an approved one whose leave has not started (its days are given back).

        Args:
            request_id: The request to cancel.
        """
        request = self.leave_requests.get(request_id)
        if request is None:
            return {"success": False, "error": f"No leave request with id {request_id}."}
        if request["status"] not in OPEN_STATUSES:
            return {"success": False, "error": f"Request {request_id} is {request['status']}."}
        if request["status"] == "approved":
            if request["start_date"] <= self.current_date:
                return {"success": False, "error": "Leave that has already started cannot be cancelled."}
            balances = self.leave_balances.get(request["employee_id"], {})
            balances[request["leave_type"]] = balances.get(request["leave_type"], 0) + request["days"]
            self.leave_balances[request["employee_id"]] = balances
        request["status"] = "cancelled"
        return {"success": True, "message": f"Request {request_id} cancelled."}
